//! The `&'static str` labels of a snapshot (a sync call's kind, a finding's evidence names)
//! read back from the viewers' wire (`viewers::wire`). They are the code's own names, a few
//! dozen, so each distinct one is kept once for the life of the process; past a bound (a
//! corrupt or hostile stream), a stand-in, so reading never grows memory without end.

use std::sync::Mutex;

use serde::{Deserialize, Deserializer};

/// A label's type in the snapshot: a name the code chose. (Named, so that serde does not take
/// a `&'static str` field for text borrowed from the input.)
pub type Label = &'static str;

/// Distinct labels kept (the code has fewer than 200).
const MAX_LABELS: usize = 512;
/// Longer text is no label of ours.
const MAX_LEN: usize = 64;
/// What a label beyond the bounds reads as.
pub const UNKNOWN: &str = "?";

static LABELS: Mutex<Table> = Mutex::new(Table::new(MAX_LABELS));

/// The labels read so far.
struct Table {
    labels: Vec<&'static str>,
    cap: usize,
}

impl Table {
    const fn new(cap: usize) -> Self {
        Self {
            labels: Vec::new(),
            cap,
        }
    }

    fn intern(&mut self, text: &str) -> &'static str {
        if text.len() > MAX_LEN {
            return UNKNOWN;
        }
        if let Some(known) = self.labels.iter().find(|l| **l == text) {
            return known;
        }
        if self.labels.len() >= self.cap {
            return UNKNOWN;
        }
        let leaked: &'static str = Box::leak(text.to_owned().into_boxed_str());
        self.labels.push(leaked);
        leaked
    }
}

/// The one `&'static str` for `text` (or [`UNKNOWN`] past the bounds).
pub fn intern(text: &str) -> &'static str {
    LABELS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .intern(text)
}

/// `#[serde(deserialize_with)]` for a `&'static str`.
pub fn one<'de, D: Deserializer<'de>>(deserializer: D) -> Result<&'static str, D::Error> {
    Ok(intern(&String::deserialize(deserializer)?))
}

/// `#[serde(deserialize_with)]` for a `Vec<(&'static str, T)>`.
pub fn pairs<'de, D, T>(deserializer: D) -> Result<Vec<(&'static str, T)>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    let pairs = Vec::<(String, T)>::deserialize(deserializer)?;
    Ok(pairs
        .into_iter()
        .map(|(label, value)| (intern(&label), value))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_label_is_kept_once_and_the_table_is_bounded() {
        let mut table = Table::new(4);
        let a = table.intern("fsync");
        let b = table.intern(&String::from("fsync"));
        assert!(std::ptr::eq(a, b), "the same text gives the same label");
        assert_eq!(table.intern(&"x".repeat(MAX_LEN + 1)), UNKNOWN);
        for i in 0..10 {
            table.intern(&format!("label-{i}"));
        }
        assert_eq!(
            table.labels.len(),
            4,
            "the table never grows past its bound"
        );
        assert_eq!(table.intern("label-3"), UNKNOWN, "past the bound");
        assert_eq!(table.intern("label-2"), "label-2", "kept ones stay");
        assert!(std::ptr::eq(table.intern("fsync"), a));
        assert_eq!(intern("fdatasync"), "fdatasync");
    }
}
