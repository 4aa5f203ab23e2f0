//! Medians, spreads and the units the report prints.

/// The median of repeated measurements, with their range.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Spread {
    /// Middle value (mean of the two middle values for an even count).
    pub median: f64,
    /// Smallest value.
    pub min: f64,
    /// Largest value.
    pub max: f64,
}

impl Spread {
    /// `None` for no samples.
    pub fn of(samples: &[f64]) -> Option<Spread> {
        let mut v: Vec<f64> = samples.iter().copied().filter(|x| x.is_finite()).collect();
        if v.is_empty() {
            return None;
        }
        v.sort_by(f64::total_cmp);
        let n = v.len();
        let median = if n % 2 == 1 { v[n / 2] } else { (v[n / 2 - 1] + v[n / 2]) / 2.0 };
        Some(Spread { median, min: v[0], max: v[n - 1] })
    }
}

/// A report section: `### title`, the paragraph `intro`, and a table of
/// `rows` under its header row and alignment row (`columns`, without line
/// ends); empty when there are no rows.
pub fn table_section(title: &str, intro: &str, columns: [&str; 2], rows: &str) -> String {
    if rows.is_empty() {
        return String::new();
    }
    format!("### {title}\n\n{intro}\n\n{}\n{}\n{rows}\n", columns[0], columns[1])
}

/// `1 KiB`, `1 MiB`, `1.5 MiB`, `1000 B`.
pub fn bytes(n: u64) -> String {
    const UNITS: [(u64, &str); 3] = [(1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")];
    for (unit, name) in UNITS {
        if n >= unit {
            return if n % unit == 0 {
                format!("{} {name}", n / unit)
            } else {
                format!("{:.2} {name}", n as f64 / unit as f64)
            };
        }
    }
    format!("{n} B")
}

/// A rate with an SI prefix: `3.21 M`, `9.87 k`, `512`.
pub fn si(x: f64) -> String {
    if x >= 1e9 {
        format!("{:.2} G", x / 1e9)
    } else if x >= 1e6 {
        format!("{:.2} M", x / 1e6)
    } else if x >= 1e3 {
        format!("{:.2} k", x / 1e3)
    } else {
        format!("{x:.0}")
    }
}

/// Parses `1024`, `1K`, `1KiB`, `64k`, `1M`, `1MiB`, `2G` (powers of 1024).
pub fn parse_bytes(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: u64 = num.parse().map_err(|_| format!("{s:?} is not a size (try 1024, 1KiB, 1MiB)"))?;
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kib" | "kb" => 1 << 10,
        "m" | "mib" | "mb" => 1 << 20,
        "g" | "gib" | "gb" => 1 << 30,
        other => return Err(format!("{s:?}: unknown unit {other:?} (B, KiB, MiB, GiB)")),
    };
    n.checked_mul(mult).ok_or_else(|| format!("{s:?} is too large"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_table_section_has_its_title_intro_header_and_rows_or_nothing() {
        let columns = ["| a | b |", "| --- | ---: |"];
        assert_eq!(
            table_section("T", "Intro.", columns, "| 1 | 2 |\n"),
            "### T\n\nIntro.\n\n| a | b |\n| --- | ---: |\n| 1 | 2 |\n\n"
        );
        assert_eq!(table_section("T", "Intro.", columns, ""), "");
    }

    #[test]
    fn medians_and_ranges() {
        assert_eq!(Spread::of(&[]), None);
        assert_eq!(Spread::of(&[3.0, 1.0, 2.0]), Some(Spread { median: 2.0, min: 1.0, max: 3.0 }));
        assert_eq!(Spread::of(&[4.0, 1.0, 2.0, 3.0]).map(|s| s.median), Some(2.5));
    }

    #[test]
    fn sizes_parse_and_print() {
        assert_eq!(parse_bytes("1KiB"), Ok(1024));
        assert_eq!(parse_bytes("1M"), Ok(1 << 20));
        assert_eq!(parse_bytes("4096"), Ok(4096));
        assert!(parse_bytes("1 parsec").is_err());
        assert_eq!(bytes(1024), "1 KiB");
        assert_eq!(bytes(1 << 20), "1 MiB");
        assert_eq!(bytes(1000), "1000 B");
        assert_eq!(si(2_500_000.0), "2.50 M");
    }
}
