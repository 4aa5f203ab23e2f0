//! The kernel references: a Unix domain socket (`socketpair`), TCP over
//! loopback (`TCP_NODELAY`) and pipes
//! between this process and its peer, used with plain blocking `read` and
//! `write` calls, one message per call.
//!
//! The peer inherits its ends: they are created close-on-exec, the peer's
//! ends are made inheritable just before it starts (only one peer starts
//! at a time) and closed here right after, and the peer finds them by the
//! descriptor numbers on its command line. So when the peer dies, this
//! process reads end-of-file rather than waiting for ever, and vice versa.

use rustix::fd::{AsRawFd, FromRawFd, OwnedFd};
use rustix::io::{fcntl_setfd, FdFlags};
use rustix::pipe::{pipe_with, PipeFlags};
use std::fs::File;
use std::net::{TcpListener, TcpStream};
use std::os::unix::net::UnixStream;

/// A kernel transport.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A connected `AF_UNIX` `SOCK_STREAM` pair.
    Unix,
    /// One pipe per direction.
    Pipe,
    /// A TCP connection over loopback (127.0.0.1), `TCP_NODELAY` on both
    /// ends.
    Tcp,
}

/// This process's ends. `rx` is `None` for a one-way link.
pub struct Link {
    /// Where the peer's messages arrive.
    pub rx: Option<File>,
    /// Where messages to the peer go.
    pub tx: File,
}

/// The peer's ends, held open until the peer has started.
pub struct PeerEnds {
    _fds: Vec<OwnedFd>,
    /// `--fd-in N [--fd-out M]` for the peer's command line.
    pub args: Vec<String>,
}

fn inheritable(fd: &OwnedFd) -> Result<i32, String> {
    fcntl_setfd(fd, FdFlags::empty()).map_err(|e| format!("fcntl(F_SETFD): {e}"))?;
    Ok(fd.as_raw_fd())
}

/// A link to the next peer: `duplex` for ping-pong (both directions),
/// else one-way from this process to the peer.
pub fn link(kind: Kind, duplex: bool) -> Result<(Link, PeerEnds), String> {
    match kind {
        Kind::Unix => {
            let (mine, theirs) = UnixStream::pair().map_err(|e| format!("socketpair: {e}"))?;
            let theirs = OwnedFd::from(theirs);
            let n = inheritable(&theirs)?;
            let tx = File::from(OwnedFd::from(mine));
            let rx = if duplex { Some(tx.try_clone().map_err(|e| format!("dup: {e}"))?) } else { None };
            let mut args = vec!["--fd-in".to_owned(), n.to_string()];
            if duplex {
                args.extend(["--fd-out".to_owned(), n.to_string()]);
            }
            Ok((Link { rx, tx }, PeerEnds { _fds: vec![theirs], args }))
        }
        Kind::Tcp => {
            let listener = TcpListener::bind(("127.0.0.1", 0)).map_err(|e| format!("tcp bind: {e}"))?;
            let addr = listener.local_addr().map_err(|e| format!("tcp: {e}"))?;
            let mine = TcpStream::connect(addr).map_err(|e| format!("tcp connect to {addr}: {e}"))?;
            let me = mine.local_addr().map_err(|e| format!("tcp: {e}"))?;
            // Only this process knows the fresh port, but make sure the
            // connection accepted is ours.
            let theirs = loop {
                let (s, from) = listener.accept().map_err(|e| format!("tcp accept: {e}"))?;
                if from == me {
                    break s;
                }
            };
            for s in [&mine, &theirs] {
                s.set_nodelay(true).map_err(|e| format!("TCP_NODELAY: {e}"))?;
            }
            let theirs = OwnedFd::from(theirs);
            let n = inheritable(&theirs)?;
            let tx = File::from(OwnedFd::from(mine));
            let rx = if duplex { Some(tx.try_clone().map_err(|e| format!("dup: {e}"))?) } else { None };
            let mut args = vec!["--fd-in".to_owned(), n.to_string()];
            if duplex {
                args.extend(["--fd-out".to_owned(), n.to_string()]);
            }
            Ok((Link { rx, tx }, PeerEnds { _fds: vec![theirs], args }))
        }
        Kind::Pipe => {
            let pipe = || pipe_with(PipeFlags::CLOEXEC).map_err(|e| format!("pipe: {e}"));
            let (their_in, my_out) = pipe()?;
            let mut args = vec!["--fd-in".to_owned(), inheritable(&their_in)?.to_string()];
            let mut fds = vec![their_in];
            let rx = if duplex {
                let (my_in, their_out) = pipe()?;
                args.extend(["--fd-out".to_owned(), inheritable(&their_out)?.to_string()]);
                fds.push(their_out);
                Some(File::from(my_in))
            } else {
                None
            };
            Ok((Link { rx, tx: File::from(my_out) }, PeerEnds { _fds: fds, args }))
        }
    }
}

/// In the peer: takes over the descriptors the benchmark process passed,
/// as `(in, out)`; the same number twice (a socket) gives two handles.
pub fn adopt(fd_in: Option<i32>, fd_out: Option<i32>) -> Result<(Option<File>, Option<File>), String> {
    let take = |n: i32| -> Result<File, String> {
        if n < 3 {
            return Err(format!("descriptor {n} is not one the benchmark passed"));
        }
        // SAFETY: the benchmark process created descriptor `n` for this
        // peer, left it open across exec, and named it on the command line;
        // nothing else in this process owns it, and it is adopted once
        // (the same number for in and out is dup'ed below, not adopted
        // twice).
        Ok(File::from(unsafe { OwnedFd::from_raw_fd(n) }))
    };
    let rx = fd_in.map(take).transpose()?;
    let tx = match (fd_out, &rx) {
        (Some(o), Some(r)) if Some(o) == fd_in => Some(r.try_clone().map_err(|e| format!("dup: {e}"))?),
        (Some(o), _) => Some(take(o)?),
        (None, _) => None,
    };
    Ok((rx, tx))
}
