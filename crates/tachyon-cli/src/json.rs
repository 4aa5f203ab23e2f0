//! A minimal JSON value and writer: enough for the `--json` output of the
//! tools, with correct string escaping, and no dependency.
//!
//! ```
//! use tachyon_cli::json::Json;
//! let doc = Json::object([("name", Json::from("a\"b")), ("size", Json::from(4096u64))]);
//! assert_eq!(doc.to_string(), r#"{"name":"a\"b","size":4096}"#);
//! ```

use std::fmt::{self, Write as _};

/// A JSON value. Objects keep their keys in insertion order.
#[derive(Debug, Clone, PartialEq)]
pub enum Json {
    /// `null`.
    Null,
    /// `true` or `false`.
    Bool(bool),
    /// An unsigned integer (written exactly).
    UInt(u64),
    /// A signed integer (written exactly).
    Int(i64),
    /// A floating-point number; NaN and infinities are written as `null`.
    Float(f64),
    /// A string (escaped when written).
    Str(String),
    /// An array.
    Array(Vec<Json>),
    /// An object, keys in order.
    Object(Vec<(String, Json)>),
}

impl Json {
    /// An object from `(key, value)` pairs.
    pub fn object<K: Into<String>>(pairs: impl IntoIterator<Item = (K, Json)>) -> Json {
        Json::Object(pairs.into_iter().map(|(k, v)| (k.into(), v)).collect())
    }

    /// An array from values.
    pub fn array(items: impl IntoIterator<Item = Json>) -> Json {
        Json::Array(items.into_iter().collect())
    }
}

impl From<bool> for Json {
    fn from(v: bool) -> Json {
        Json::Bool(v)
    }
}

impl From<u64> for Json {
    fn from(v: u64) -> Json {
        Json::UInt(v)
    }
}

impl From<u32> for Json {
    fn from(v: u32) -> Json {
        Json::UInt(u64::from(v))
    }
}

impl From<usize> for Json {
    fn from(v: usize) -> Json {
        Json::UInt(v as u64)
    }
}

impl From<i64> for Json {
    fn from(v: i64) -> Json {
        Json::Int(v)
    }
}

impl From<f64> for Json {
    fn from(v: f64) -> Json {
        Json::Float(v)
    }
}

impl From<&str> for Json {
    fn from(v: &str) -> Json {
        Json::Str(v.to_owned())
    }
}

impl From<String> for Json {
    fn from(v: String) -> Json {
        Json::Str(v)
    }
}

impl<T: Into<Json>> From<Option<T>> for Json {
    fn from(v: Option<T>) -> Json {
        v.map_or(Json::Null, Into::into)
    }
}

impl fmt::Display for Json {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Json::Null => f.write_str("null"),
            Json::Bool(b) => write!(f, "{b}"),
            Json::UInt(n) => write!(f, "{n}"),
            Json::Int(n) => write!(f, "{n}"),
            // Rust's `Display` for f64 is the shortest text that reads back
            // as the same number and never uses an exponent: valid JSON.
            Json::Float(x) if x.is_finite() => write!(f, "{x}"),
            Json::Float(_) => f.write_str("null"),
            Json::Str(s) => write_str(f, s),
            Json::Array(items) => {
                f.write_char('[')?;
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        f.write_char(',')?;
                    }
                    write!(f, "{item}")?;
                }
                f.write_char(']')
            }
            Json::Object(pairs) => {
                f.write_char('{')?;
                for (i, (key, value)) in pairs.iter().enumerate() {
                    if i > 0 {
                        f.write_char(',')?;
                    }
                    write_str(f, key)?;
                    write!(f, ":{value}")?;
                }
                f.write_char('}')
            }
        }
    }
}

/// Writes `s` as a JSON string: quotes, backslashes and every control
/// character escaped (RFC 8259, section 7).
fn write_str(f: &mut fmt::Formatter<'_>, s: &str) -> fmt::Result {
    f.write_char('"')?;
    for c in s.chars() {
        match c {
            '"' => f.write_str("\\\"")?,
            '\\' => f.write_str("\\\\")?,
            '\n' => f.write_str("\\n")?,
            '\r' => f.write_str("\\r")?,
            '\t' => f.write_str("\\t")?,
            '\u{08}' => f.write_str("\\b")?,
            '\u{0c}' => f.write_str("\\f")?,
            c if u32::from(c) < 0x20 => write!(f, "\\u{:04x}", u32::from(c))?,
            c => f.write_char(c)?,
        }
    }
    f.write_char('"')
}

#[cfg(test)]
mod tests {
    use super::Json;

    #[test]
    fn escapes_what_json_requires() {
        let s = "q\" b\\ n\n r\r t\t nul\0 bell\u{7} del\u{7f} é ✓ \u{2028}";
        let text = Json::from(s).to_string();
        let back: serde_json::Value = serde_json::from_str(&text).expect("valid JSON");
        assert_eq!(back, serde_json::Value::String(s.to_owned()));
        assert!(!text.chars().any(|c| u32::from(c) < 0x20), "{text}");
    }

    #[test]
    fn numbers_and_nesting_read_back() {
        let doc = Json::object([
            ("u", Json::from(u64::MAX)),
            ("i", Json::from(-5i64)),
            ("f", Json::from(0.1f64)),
            ("tiny", Json::from(1e-12f64)),
            ("big", Json::from(1e300f64)),
            ("nan", Json::from(f64::NAN)),
            ("none", Json::from(None::<u64>)),
            ("list", Json::array([Json::from(true), Json::Null, Json::object::<&str>([])])),
        ]);
        let v: serde_json::Value = serde_json::from_str(&doc.to_string()).expect("valid JSON");
        assert_eq!(v["u"], serde_json::json!(u64::MAX));
        assert_eq!(v["i"], serde_json::json!(-5));
        assert_eq!(v["f"].as_f64(), Some(0.1));
        assert_eq!(v["tiny"].as_f64(), Some(1e-12));
        assert_eq!(v["big"].as_f64(), Some(1e300));
        assert!(v["nan"].is_null() && v["none"].is_null());
        assert_eq!(v["list"], serde_json::json!([true, null, {}]));
    }
}
