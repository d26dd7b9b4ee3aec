//! What a value costs when the proxy keeps it: its JSON length, counted without writing the JSON anywhere.
//! The byte bounds (`run_buffer`, `[store] max_record` and `max_bytes`, a task's history and artifacts, a
//! CMDC session's message log) all count with it.

use serde::Serialize;

/// The length of `value` as JSON.
pub fn json_len(value: &impl Serialize) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0 += bytes.len();
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    // What the proxy keeps is plain data: serializing it cannot fail.
    let _ = serde_json::to_writer(&mut count, value);
    count.0
}

#[cfg(test)]
mod tests {
    #[test]
    fn counts_what_serde_json_writes() {
        let value = serde_json::json!({"a": "é", "b": [1, 2]});
        assert_eq!(super::json_len(&value), value.to_string().len());
    }
}
