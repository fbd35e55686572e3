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
