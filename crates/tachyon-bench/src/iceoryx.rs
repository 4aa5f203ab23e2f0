//! The optional side-by-side with iceoryx2 (the crate from crates.io,
//! cargo feature `iceoryx2`, not built by CI): the same 256 B ping-pong
//! and the same one-way stream as the topics group, through iceoryx2
//! publish-subscribe services of `[u8]` slices between the same two
//! processes.
//!
//! Each message is copied into a loaned sample (`loan_slice_uninit` +
//! `write_from_slice`) and sent; the receiver polls `receive()` (busy
//! waiting, like tachyon's `spin`), checks the sequence stamps and, for a
//! pong, compares it with its ping byte for byte. The stream's subscriber
//! buffer holds `capacity` samples and the publisher retries while it is
//! full (back-pressure), for at most the stall timeout; every other wait is
//! bounded by the stall timeout too.

use crate::payload;
use crate::rawring::Patience;
use iceoryx2::port::update_connections::UpdateConnections;
use iceoryx2::port::BackpressureAction;
use iceoryx2::prelude::*;
use std::time::Duration;

/// The services of one run: `<base>/ping`, `<base>/pong` or `<base>/data`.
fn service_name(base: &str, which: &str) -> Result<ServiceName, String> {
    format!("{base}/{which}").as_str().try_into().map_err(|e| format!("iceoryx2 service name: {e:?}"))
}

type Factory = iceoryx2::service::port_factory::publish_subscribe::PortFactory<ipc::Service, [u8], ()>;

/// A node, its services and ports, for one process of one run.
pub struct Ports {
    _node: Node<ipc::Service>,
    sends_to: Option<Factory>,
    publisher: Option<iceoryx2::port::publisher::Publisher<ipc::Service, [u8], ()>>,
    subscriber: Option<iceoryx2::port::subscriber::Subscriber<ipc::Service, [u8], ()>>,
}

impl Ports {
    /// Opens (or creates) the services of a run and this process's ports:
    /// it publishes on `send` and subscribes to `recv` (either may be
    /// absent, for the stream).
    pub fn open(
        base: &str,
        send: Option<&str>,
        recv: Option<&str>,
        size: usize,
        capacity: usize,
        stall: Duration,
    ) -> Result<Ports, String> {
        set_log_level(LogLevel::Error);
        let node =
            NodeBuilder::new().create::<ipc::Service>().map_err(|e| format!("iceoryx2 node: {e:?}"))?;
        let service = |which: &str| {
            node.service_builder(&service_name(base, which)?)
                .publish_subscribe::<[u8]>()
                .enable_safe_overflow(false)
                .subscriber_max_buffer_size(capacity)
                .subscriber_max_borrowed_samples(2)
                .max_publishers(1)
                .max_subscribers(1)
                .open_or_create()
                .map_err(|e| format!("iceoryx2 service {which}: {e:?}"))
        };
        let sends_to = send.map(service).transpose()?;
        let publisher = match (send, &sends_to) {
            (Some(which), Some(factory)) => Some(
                factory
                    .publisher_builder()
                    .initial_max_slice_len(size)
                    .backpressure_strategy(BackpressureStrategy::RetryUntilDelivered)
                    .set_backpressure_handler(move |info: &iceoryx2::port::BackpressureInfo| {
                        if info.elapsed_time >= stall {
                            BackpressureAction::DiscardDataAndFail
                        } else {
                            BackpressureAction::Retry
                        }
                    })
                    .create()
                    .map_err(|e| format!("iceoryx2 publisher {which}: {e:?}"))?,
            ),
            _ => None,
        };
        let subscriber = match recv {
            Some(which) => Some(
                service(which)?
                    .subscriber_builder()
                    .buffer_size(capacity)
                    .create()
                    .map_err(|e| format!("iceoryx2 subscriber {which}: {e:?}"))?,
            ),
            None => None,
        };
        Ok(Ports { _node: node, sends_to, publisher, subscriber })
    }

    /// Waits (spinning, bounded) until the peer's subscriber is connected.
    pub fn wait_for_subscriber(&self, patience: &mut Patience<'_>) -> Result<(), String> {
        let publisher = self.publisher.as_ref().ok_or("no publisher")?;
        let factory = self.sends_to.as_ref().ok_or("no service to send to")?;
        patience.spin_until("the iceoryx2 subscriber did not connect", || {
            factory.dynamic_config().number_of_subscribers() > 0
        })?;
        publisher.update_connections().map_err(|e| format!("iceoryx2 connections: {e:?}"))
    }

    /// Copies `msg` into a loaned sample and sends it.
    pub fn send(&self, msg: &[u8]) -> Result<(), String> {
        let publisher = self.publisher.as_ref().ok_or("no publisher")?;
        let sample = publisher.loan_slice_uninit(msg.len()).map_err(|e| format!("iceoryx2 loan: {e:?}"))?;
        let delivered = sample
            .write_from_slice(msg)
            .send()
            .map_err(|e| format!("iceoryx2 send (full for long?): {e:?}"))?;
        if delivered == 0 {
            return Err("iceoryx2 send: no subscriber (did the peer exit?)".into());
        }
        Ok(())
    }

    /// Waits (spinning, bounded) for the next sample and hands it to `f`.
    pub fn receive<R>(
        &self,
        patience: &mut Patience<'_>,
        what: &str,
        f: impl FnOnce(&[u8]) -> R,
    ) -> Result<R, String> {
        let subscriber = self.subscriber.as_ref().ok_or("no subscriber")?;
        let mut got = subscriber.receive().map_err(|e| format!("iceoryx2 receive: {e:?}"))?;
        if got.is_none() {
            let mut failed = None;
            patience.spin_until(what, || match subscriber.receive() {
                Ok(Some(s)) => {
                    got = Some(s);
                    true
                }
                Ok(None) => false,
                Err(e) => {
                    failed = Some(format!("iceoryx2 receive: {e:?}"));
                    true
                }
            })?;
            if let Some(e) = failed {
                return Err(e);
            }
        }
        let sample = got.ok_or("iceoryx2: no sample")?;
        Ok(f(sample.payload()))
    }
}

/// Checks a received message: its length and stamps.
pub fn check(msg: &[u8], size: usize, seq: u64) -> Result<(), String> {
    if msg.len() != size {
        return Err(format!("a message of {} bytes, expected {size}", msg.len()));
    }
    payload::check(msg, seq)
}
