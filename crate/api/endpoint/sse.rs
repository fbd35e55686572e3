//! Server-Sent Events, read from bytes as they arrive (the WHATWG rules a browser's EventSource
//! follows): lines end in LF, CRLF or CR; a line starting with `:` is a comment (a server's
//! ping); `data:` lines (one optional space after the colon) join with LF into one event, which a
//! blank line ends; `event:` names it. A read may end anywhere, inside a line or between a CR and
//! its LF: what is left waits for the next read. Pure: no I/O, so the CLI and the page share it.

/// The longest line kept while waiting for its end; a stream that sends more without a newline
/// is not Server-Sent Events (or is hostile).
pub const MAX_LINE: usize = 4 << 20; // the error below says 4 MiB

/// One event: its `data` lines joined, and its `event:` name if it had one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    pub event: Option<String>,
    pub data: String,
}

/// The parser's state between reads.
#[derive(Debug, Default)]
pub struct SseParser {
    /// Bytes of a line not yet ended.
    line: Vec<u8>,
    /// The last byte read was a CR: an LF that follows belongs to it.
    after_cr: bool,
    data: Option<String>,
    event: Option<String>,
    /// The line being read is a comment.
    in_comment: bool,
    /// Bytes read that are not comments or line ends: a server's pings are not progress.
    progress: u64,
}

impl SseParser {
    pub fn new() -> Self {
        Self::default()
    }

    /// Read `bytes`; the events they complete, in order. An error is one sentence.
    pub fn feed(&mut self, bytes: &[u8]) -> Result<Vec<SseEvent>, String> {
        let mut events = Vec::new();
        for &b in bytes {
            if self.after_cr {
                self.after_cr = false;
                if b == b'\n' {
                    continue;
                }
            }
            match b {
                b'\n' | b'\r' => {
                    self.after_cr = b == b'\r';
                    let line = std::mem::take(&mut self.line);
                    if let Some(event) = self.line_ended(&line) {
                        events.push(event);
                    }
                }
                _ => {
                    if self.line.is_empty() {
                        self.in_comment = b == b':';
                    }
                    if !self.in_comment {
                        self.progress += 1;
                    }
                    if self.line.len() >= MAX_LINE {
                        return Err(
                            "the stream sent a line longer than 4 MiB without a newline: \
                                    it is not Server-Sent Events"
                                .to_string(),
                        );
                    }
                    self.line.push(b);
                }
            }
        }
        Ok(events)
    }

    /// Bytes read so far that were not comments (`:` lines, a server's pings) or line ends.
    pub fn progress(&self) -> u64 {
        self.progress
    }

    /// The stream ended: an event whose blank line never came is dispatched all the same (a
    /// server that closes after its last `data:` line), as is a last line without its end.
    pub fn finish(&mut self) -> Option<SseEvent> {
        let line = std::mem::take(&mut self.line);
        let event = if line.is_empty() {
            None
        } else {
            self.line_ended(&line)
        };
        event.or_else(|| self.dispatch())
    }

    fn line_ended(&mut self, line: &[u8]) -> Option<SseEvent> {
        if line.is_empty() {
            return self.dispatch();
        }
        if line[0] == b':' {
            return None;
        }
        let text = String::from_utf8_lossy(line);
        let (field, value) = match text.split_once(':') {
            Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
            None => (text.as_ref(), ""),
        };
        match field {
            "data" => {
                let data = self.data.get_or_insert_with(String::new);
                data.push_str(value);
                data.push('\n');
            }
            "event" => self.event = Some(value.to_string()),
            // id and retry steer a browser's reconnection, which a metered request never does.
            _ => {}
        }
        None
    }

    fn dispatch(&mut self) -> Option<SseEvent> {
        let event = self.event.take();
        let mut data = self.data.take()?;
        data.pop(); // the last line's LF
        Some(SseEvent { event, data })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(parts: &[&[u8]]) -> Vec<SseEvent> {
        let mut p = SseParser::new();
        let mut out: Vec<SseEvent> = parts.iter().flat_map(|b| p.feed(b).unwrap()).collect();
        out.extend(p.finish());
        out
    }

    fn data(d: &str) -> SseEvent {
        SseEvent {
            event: None,
            data: d.into(),
        }
    }

    #[test]
    fn events_split_anywhere_read_the_same() {
        let stream = b": ping\r\n\r\ndata: {\"a\":1}\r\n\r\ndata:{\"b\":2}\n\ndata: x\rdata: y\r\r\
                       event: error\ndata: bad\n\ndata: [DONE]\n\n";
        let want = vec![
            data("{\"a\":1}"),
            data("{\"b\":2}"),
            data("x\ny"),
            SseEvent {
                event: Some("error".into()),
                data: "bad".into(),
            },
            data("[DONE]"),
        ];
        assert_eq!(all(&[stream]), want);
        // Every split into two reads, and byte by byte (a CR and its LF in different reads).
        for cut in 0..stream.len() {
            assert_eq!(all(&[&stream[..cut], &stream[cut..]]), want, "cut at {cut}");
        }
        let bytes: Vec<&[u8]> = stream.chunks(1).collect();
        assert_eq!(all(&bytes), want);
    }

    #[test]
    fn a_stream_that_ends_without_its_blank_line_still_gives_its_event() {
        assert_eq!(all(&[b"data: last"]), vec![data("last")]);
        assert_eq!(all(&[b"data: last\n"]), vec![data("last")]);
        assert_eq!(all(&[b": only a comment\n"]), vec![]);
    }

    #[test]
    fn an_endless_line_is_an_error_not_a_memory_leak() {
        let mut p = SseParser::new();
        let big = vec![b'a'; MAX_LINE + 1];
        let e = p.feed(&big).unwrap_err();
        assert!(e.contains("not Server-Sent Events"), "{e}");
    }
}
