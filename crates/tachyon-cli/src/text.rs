//! Text for people: sizes, ages, aligned tables, and names made
//! safe to print on a terminal.

use std::time::{Duration, SystemTime};

/// Nanoseconds since the Unix epoch, now.
pub fn now_unix_ns() -> u64 {
    SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64)
}

/// A byte count with a binary unit: `512 B`, `1.0 KiB`, `64.0 MiB`.
///
/// ```
/// assert_eq!(tachyon_cli::text::bytes(64 << 20), "64.0 MiB");
/// assert_eq!(tachyon_cli::text::bytes(100), "100 B");
/// ```
pub fn bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

/// A duration, short: `850ms`, `12.3s`, `5m12s`, `3h05m`, `2d04h`.
///
/// ```
/// use std::time::Duration;
/// assert_eq!(tachyon_cli::text::duration(Duration::from_millis(312_000)), "5m12s");
/// ```
pub fn duration(d: Duration) -> String {
    let s = d.as_secs();
    if d < Duration::from_secs(1) {
        format!("{}ms", d.as_millis())
    } else if s < 60 {
        format!("{:.1}s", d.as_secs_f64())
    } else if s < 3600 {
        format!("{}m{:02}s", s / 60, s % 60)
    } else if s < 86_400 {
        format!("{}h{:02}m", s / 3600, s % 3600 / 60)
    } else {
        format!("{}d{:02}h", s / 86_400, s % 86_400 / 3600)
    }
}

/// How long ago `then_ns` (ns since the epoch) was, seen at `now_ns`:
/// `5m12s ago`, `never` for 0, `in the future` for a clock that went back.
pub fn ago(now_ns: u64, then_ns: u64) -> String {
    if then_ns == 0 {
        "never".to_owned()
    } else if then_ns > now_ns {
        "in the future".to_owned()
    } else {
        format!("{} ago", duration(Duration::from_nanos(now_ns - then_ns)))
    }
}

/// `s` made safe for a terminal: control characters (which a segment's
/// recorded name may hold) are shown escaped instead of being sent to it.
///
/// ```
/// assert_eq!(tachyon_cli::text::clean("a\u{1b}[2Jb"), "a\\u{1b}[2Jb");
/// ```
pub fn clean(s: &str) -> String {
    if !s.chars().any(char::is_control) {
        return s.to_owned();
    }
    s.chars().map(|c| if c.is_control() { c.escape_default().to_string() } else { c.to_string() }).collect()
}

/// `s` quoted for a log line or message, control characters escaped:
/// `"md"`.
pub fn quoted(s: &str) -> String {
    format!("{s:?}")
}

/// A list of process ids, `pid 12` or `pids 12, 34`.
pub fn pids(pids: impl IntoIterator<Item = u32>) -> String {
    let list: Vec<String> = pids.into_iter().map(|p| p.to_string()).collect();
    match list.len() {
        0 => "no pid recorded".to_owned(),
        1 => format!("pid {}", list[0]),
        _ => format!("pids {}", list.join(", ")),
    }
}

/// `n thing` or `n things`.
pub fn count(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// Column alignment in a [`Table`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Align {
    /// Text: left.
    Left,
    /// Numbers: right.
    Right,
}

/// An aligned text table: a header row, then rows; two spaces between
/// columns; the last column is not padded.
///
/// ```
/// use tachyon_cli::text::{Align, Table};
/// let mut t = Table::new([("NAME", Align::Left), ("SIZE", Align::Right)]);
/// t.row(["md", "64"]);
/// t.row(["orders", "1"]);
/// assert_eq!(t.render(), "NAME    SIZE\nmd        64\norders     1\n");
/// ```
#[derive(Debug, Clone)]
pub struct Table {
    headers: Vec<String>,
    align: Vec<Align>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with these column headers.
    pub fn new<'a>(columns: impl IntoIterator<Item = (&'a str, Align)>) -> Table {
        let (headers, align) = columns.into_iter().map(|(h, a)| (h.to_owned(), a)).unzip();
        Table { headers, align, rows: Vec::new() }
    }

    /// Adds a row (missing cells are empty, extra cells are dropped).
    pub fn row<S: Into<String>>(&mut self, cells: impl IntoIterator<Item = S>) {
        let mut row: Vec<String> = cells.into_iter().map(Into::into).take(self.headers.len()).collect();
        row.resize(self.headers.len(), String::new());
        self.rows.push(row);
    }

    /// Whether no row was added.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// The table as lines of text, each ending in a newline.
    pub fn render(&self) -> String {
        let width = |s: &str| s.chars().count();
        let mut widths: Vec<usize> = self.headers.iter().map(|h| width(h)).collect();
        for row in &self.rows {
            for (w, cell) in widths.iter_mut().zip(row) {
                *w = (*w).max(width(cell));
            }
        }
        let last = self.headers.len().saturating_sub(1);
        let mut out = String::new();
        for row in std::iter::once(&self.headers).chain(&self.rows) {
            let mut line = String::new();
            for (i, cell) in row.iter().enumerate() {
                if i > 0 {
                    line.push_str("  ");
                }
                let pad = widths[i] - width(cell);
                match self.align[i] {
                    Align::Right => {
                        line.extend(std::iter::repeat_n(' ', pad));
                        line.push_str(cell);
                    }
                    Align::Left => {
                        line.push_str(cell);
                        if i < last {
                            line.extend(std::iter::repeat_n(' ', pad));
                        }
                    }
                }
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_and_ages() {
        assert_eq!(duration(Duration::from_millis(850)), "850ms");
        assert_eq!(duration(Duration::from_millis(12_345)), "12.3s");
        assert_eq!(duration(Duration::from_secs(3 * 3600 + 5 * 60)), "3h05m");
        assert_eq!(duration(Duration::from_secs(2 * 86_400 + 4 * 3600)), "2d04h");
        assert_eq!(ago(10_000_000_000, 0), "never");
        assert_eq!(ago(10_000_000_000, 9_000_000_000), "1.0s ago");
        assert_eq!(ago(1, 2), "in the future");
    }

    #[test]
    fn sizes_and_lists() {
        assert_eq!(bytes(1536), "1.5 KiB");
        assert_eq!(pids([]), "no pid recorded");
        assert_eq!(pids([7, 9]), "pids 7, 9");
        assert_eq!(count(1, "chunk", "chunks"), "1 chunk");
    }
}
