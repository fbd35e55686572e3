//! Stop strings: the text streamed is held back while it could still be the start of one, and
//! cut where one begins (the stop string itself is not sent, as OpenAI's API does). Each
//! sequence matches its own (`sequence.rs`), so a stop ends it in the scheduler and the tokens
//! counted are the tokens whose text was sent.

/// Text as it is generated, minus any stop string and what follows it.
#[derive(Debug, Default)]
pub struct StopText {
    stops: Vec<String>,
    text: String,
    /// Bytes of `text` handed out.
    sent: usize,
    stopped: bool,
}

impl StopText {
    pub fn new(stops: Vec<String>) -> Self {
        Self {
            stops,
            ..Self::default()
        }
    }

    /// Add a piece of generated text; returns what may be sent now (possibly empty).
    pub fn push(&mut self, piece: &str) -> String {
        if self.stopped {
            return String::new();
        }
        // A stop string may begin in text held back before this piece.
        let longest = self.stops.iter().map(String::len).max().unwrap_or(0);
        let mut from = self.sent.saturating_sub(longest);
        self.text.push_str(piece);
        while !self.text.is_char_boundary(from) {
            from -= 1;
        }
        let found = self
            .stops
            .iter()
            .filter_map(|s| self.text[from..].find(s.as_str()).map(|i| from + i))
            .min();
        let end = match found {
            Some(at) => {
                self.stopped = true;
                at.max(self.sent)
            }
            None => self.text.len() - self.held_back(),
        };
        let out = self.text[self.sent..end].to_string();
        self.sent = end;
        out
    }

    /// Whether a stop string has been generated.
    pub fn stopped(&self) -> bool {
        self.stopped
    }

    /// Whether there are stop strings to look for at all.
    pub fn is_empty(&self) -> bool {
        self.stops.is_empty()
    }

    /// The text held back at the end, now that no more comes (empty after a stop).
    pub fn finish(&mut self) -> String {
        if self.stopped {
            return String::new();
        }
        let out = self.text[self.sent..].to_string();
        self.sent = self.text.len();
        out
    }

    /// The longest end of the unsent text that is the start of a stop string.
    fn held_back(&self) -> usize {
        let unsent = &self.text[self.sent..];
        self.stops
            .iter()
            .flat_map(|s| {
                (1..s.len().min(unsent.len() + 1))
                    .rev()
                    .filter(|&n| s.is_char_boundary(n) && unsent.ends_with(&s[..n]))
                    .take(1)
            })
            .max()
            .unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::StopText;

    fn run(stops: &[&str], pieces: &[&str]) -> (Vec<String>, bool) {
        let mut s = StopText::new(stops.iter().map(|s| s.to_string()).collect());
        let mut out: Vec<String> = pieces.iter().map(|p| s.push(p)).collect();
        out.push(s.finish());
        (out, s.stopped())
    }

    #[test]
    fn a_stop_string_across_pieces_is_cut_and_never_sent() {
        let (out, stopped) = run(
            &["\n\nUser:"],
            &["Hello", " there\n", "\nUs", "er: hi", "more"],
        );
        assert!(stopped);
        assert_eq!(out.concat(), "Hello there");
        // The newline that might start the stop string was held back, then dropped.
        assert_eq!(out, ["Hello", " there", "", "", "", ""]);
    }

    #[test]
    fn text_that_only_looks_like_a_stop_string_is_sent_once_it_cannot_be() {
        let (out, stopped) = run(&["END"], &["The EN", "D", "!"]);
        assert!(stopped);
        assert_eq!(out.concat(), "The ");
        let (out, stopped) = run(&["END"], &["The EN", "dless", " road"]);
        assert!(!stopped);
        assert_eq!(out, ["The ", "ENdless", " road", ""]);
        let (out, _) = run(&["END"], &["ends in E"]);
        assert_eq!(out, ["ends in ", "E"]);
    }

    #[test]
    fn the_earliest_stop_wins_and_multibyte_text_is_cut_on_characters() {
        let (out, _) = run(&["b", "a"], &["xxab"]);
        assert_eq!(out.concat(), "xx");
        let (out, stopped) = run(&["é!"], &["caf", "é", "é!", "x"]);
        assert!(stopped);
        assert_eq!(out.concat(), "café");
        let (out, _) = run(&[], &["no stops"]);
        assert_eq!(out.concat(), "no stops");
    }
}
