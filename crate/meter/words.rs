//! The one definition of a word, which words/s, the reading-speed comparison and the page's
//! reading cursor all count with.

/// Words in `text`: runs of non-whitespace that hold at least one letter or digit. This is the
/// one definition of a word: words/s, the reading-speed comparison and the page's reading cursor
/// (through [`word_ends_utf16`]) all count with it.
fn words(text: &str) -> impl Iterator<Item = &str> {
    text.split_whitespace()
        .filter(|w| w.chars().any(char::is_alphanumeric))
}

pub fn count_words(text: &str) -> usize {
    words(text).count()
}

/// Where each word of `text` ends, as offsets in UTF-16 code units (JavaScript's string
/// indices), so that the page can place a reader's cursor after the N-th word without a word rule
/// of its own. The last word may still be growing while text streams in.
pub fn word_ends_utf16(text: &str) -> Vec<usize> {
    let mut ends = Vec::new();
    let (mut byte, mut utf16) = (0, 0);
    for word in words(text) {
        // `word` is a slice of `text`: its end as a byte offset.
        let end = word.as_ptr() as usize - text.as_ptr() as usize + word.len();
        utf16 += text[byte..end].encode_utf16().count();
        byte = end;
        ends.push(utf16);
    }
    ends
}

/// English text runs about 1.3 tokens a word (a token is about 4 characters). A run's own tokens
/// per word is measured (`Report::tokens_per_word`); this typical figure turns a reader's words a
/// minute into tokens a second where no text is at hand: the page's speed buttons.
pub const TYPICAL_TOKENS_PER_WORD: f64 = 1.3;

/// The rates the page's "feel a speed" buttons replay at, tokens a second.
pub const FEEL_RATES: [f64; 3] = [5.0, 20.0, 200.0];

/// How `tok_s` compares with a reader at `wpm` words a minute, in a sentence with its
/// arithmetic (the title of a speed button).
pub fn pace(tok_s: f64, wpm: f64) -> String {
    let reader = wpm / 60.0 * TYPICAL_TOKENS_PER_WORD;
    let x = tok_s / reader;
    let arithmetic = format!(
        "{wpm:.0} words a minute at about {TYPICAL_TOKENS_PER_WORD} tokens a word is {reader:.1} tok/s"
    );
    if (0.8..=1.25).contains(&x) {
        format!("About as fast as people read: {arithmetic}")
    } else if x < 0.8 {
        format!("Slower than people read, {x:.1} times reading speed: {arithmetic}")
    } else if x < 20.0 {
        format!("About {x:.0} times reading speed: {arithmetic}")
    } else {
        format!("Far faster than anyone reads, {x:.0} times reading speed: {arithmetic}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paces_compare_a_rate_with_a_reader_in_the_meter_s_words() {
        assert_eq!(
            pace(5.0, 238.0),
            "About as fast as people read: 238 words a minute at about 1.3 tokens a word is 5.2 tok/s"
        );
        assert!(pace(20.0, 238.0).starts_with("About 4 times reading speed: "));
        assert!(pace(200.0, 238.0).starts_with("Far faster than anyone reads, 39 times"));
        assert!(pace(2.0, 238.0).starts_with("Slower than people read, 0.4 times"));
    }
}
