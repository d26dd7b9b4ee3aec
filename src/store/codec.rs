//! How a record is written by the backends that keep it outside the process (redb, Redis): a small header
//! (format version, when the conversation was last touched, whether it waits on its user) that a backend can
//! read without decoding the record, then the record as JSON.
//!
//! A record of a version this proxy does not read, or one that does not decode, is logged and treated as
//! absent: the conversation starts afresh rather than the proxy failing.

use super::Record;

/// The format written. When it changes, the version before it stays in [`READABLE`], so that an upgrade
/// keeps the conversations (and the paused runs) of the version it replaces.
const VERSION: u8 = 1;
/// The formats read back: the current one and, once there is one, the one before it.
const READABLE: std::ops::RangeInclusive<u8> = 1..=VERSION;

const HEADER: usize = 1 + 8 + 1;

/// What a backend reads of a record without decoding it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Header {
    /// Microseconds since the Unix epoch.
    pub touched: u64,
    /// The record has pending interrupts: it is never evicted to make room.
    pub paused: bool,
}

/// The record's bytes as stored.
pub(super) fn encode(record: &Record, touched: u64) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(HEADER + super::record_bytes(record));
    bytes.push(VERSION);
    bytes.extend_from_slice(&touched.to_le_bytes());
    bytes.push(u8::from(!record.pending_interrupts.is_empty()));
    // A record is plain data with string keys: it always serializes.
    if let Err(error) = serde_json::to_writer(&mut bytes, record) {
        tracing::error!("a conversation record cannot be written: {error}");
    }
    bytes
}

/// The header of a stored record; `None` for bytes of a format this proxy does not read.
pub(super) fn header(bytes: &[u8]) -> Option<Header> {
    let (&version, rest) = bytes.split_first()?;
    if !READABLE.contains(&version) || rest.len() < HEADER - 1 {
        return None;
    }
    let touched = u64::from_le_bytes(rest[..8].try_into().ok()?);
    Some(Header {
        touched,
        paused: rest[8] != 0,
    })
}

/// The stored record; `None` (logged) when the bytes are not a record this proxy reads.
pub(super) fn decode(bytes: &[u8], what: &dyn std::fmt::Display) -> Option<Record> {
    let Some(_) = header(bytes) else {
        tracing::warn!(
            version = bytes.first(),
            "the stored conversation {what} is of a format this version does not read; starting afresh"
        );
        return None;
    };
    match serde_json::from_slice(&bytes[HEADER..]) {
        Ok(record) => Some(record),
        Err(error) => {
            tracing::warn!(
                "the stored conversation {what} does not decode ({error}); starting afresh"
            );
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_reads_back_with_its_header() {
        let mut record = Record::default();
        record.pending_calls.push("call-1".into());
        record.pending_interrupts.push(crate::model::Interrupt {
            id: "i-1".into(),
            kind: crate::model::InterruptKind::Question {
                text: "Which city?".into(),
                options: vec![],
            },
        });
        let bytes = encode(&record, 1_700_000_000_123_456);
        assert_eq!(
            header(&bytes),
            Some(Header {
                touched: 1_700_000_000_123_456,
                paused: true
            })
        );
        assert_eq!(decode(&bytes, &"c"), Some(record));
    }

    #[test]
    fn a_record_of_another_format_or_corrupt_reads_as_absent() {
        let mut newer = encode(&Record::default(), 1);
        newer[0] = VERSION + 1;
        assert_eq!(header(&newer), None);
        assert_eq!(decode(&newer, &"newer"), None);

        let mut corrupt = encode(&Record::default(), 1);
        corrupt.truncate(HEADER + 3);
        assert_eq!(decode(&corrupt, &"corrupt"), None);
        assert_eq!(decode(&[], &"empty"), None);
        assert_eq!(decode(&[VERSION, 1, 2], &"short"), None);
    }
}
