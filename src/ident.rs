//! A run's ident: the name ansible-runner gives its artifacts, made by the operator and read back from
//! records. The only way from a string to an [`Ident`] is [`Ident::parse`], which accepts the
//! operator's exact format and nothing else, so an ident can name a path.
//!
//! Records are stored data a namespace tenant may write: an ident read from one is checked here before
//! it becomes part of a path or a URL, whatever it holds.

use std::fmt;

/// The largest ident the operator makes: a 64-bit hash shifted right once (it fits in an `i64`).
const MAX: u64 = u64::MAX >> 1;

/// Why a string is not an ident.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// Not the operator's format: decimal digits, without a leading zero, at most `2^63 - 1`.
    #[error("a run ident is the operator's own: decimal digits without a leading zero, below 2^63")]
    Format,
}

/// A run's ident in the operator's format: the decimal form of a number below `2^63`, without a
/// leading zero (`0` itself aside). It holds only ASCII digits, so it is safe as a file name, in a
/// path and in a URL.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Ident(String);

impl Ident {
    /// A new ident, unique in this process and hard to guess: a counter hashed with a random key.
    pub fn generate() -> Self {
        use std::hash::{BuildHasher, Hasher};
        use std::sync::atomic::{AtomicU64, Ordering};
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
        hasher.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
        Ident((hasher.finish() >> 1).to_string())
    }

    /// The ident `text` spells, when it spells one exactly as [`Ident::generate`] would.
    pub fn parse(text: &str) -> Result<Self, Error> {
        // Checked byte by byte first: `u64::from_str` accepts a leading `+`.
        if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
            return Err(Error::Format);
        }
        let value: u64 = text.parse().map_err(|_| Error::Format)?;
        // The canonical spelling only: no leading zeros, so one run has one ident.
        if value > MAX || value.to_string() != text {
            return Err(Error::Format);
        }
        Ok(Ident(text.to_string()))
    }

    /// The ident's text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Ident {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<Ident> for String {
    fn from(ident: Ident) -> String {
        ident.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_idents_parse_back_and_differ() {
        for _ in 0..1000 {
            let ident = Ident::generate();
            assert_eq!(Ident::parse(ident.as_str()), Ok(ident.clone()), "{ident}");
        }
        assert_ne!(Ident::generate(), Ident::generate());
    }

    #[test]
    fn the_operators_format_is_accepted() {
        for text in ["0", "7", "123", "4611686018427387904", "9223372036854775807"] {
            assert_eq!(Ident::parse(text).map(String::from), Ok(text.to_string()), "{text}");
        }
    }

    #[test]
    fn anything_else_is_refused_whatever_it_holds() {
        let long = "1".repeat(4096);
        let corpus = [
            "",
            "../x",
            "..",
            ".",
            "1/../../x",
            "/abs",
            "/tmp/canary",
            "a/b",
            "12/34",
            "12\\34",
            "12\0",
            "\0",
            "12\n",
            " 12",
            "12 ",
            "+12",
            "-12",
            "012",
            "00",
            "1e3",
            "0x1f",
            "9223372036854775808",
            "18446744073709551615",
            "18446744073709551616",
            &long,
            "١٢٣",                // Arabic-Indic digits
            "１２３",             // full-width digits
            "12\u{200b}3",        // a zero-width space
            "\u{2024}\u{2024}/x", // one-dot leaders, a look-alike of `..`
            "replay-123",
            "abc",
        ];
        for text in corpus {
            assert_eq!(Ident::parse(text), Err(Error::Format), "{text:?}");
        }
    }
}
