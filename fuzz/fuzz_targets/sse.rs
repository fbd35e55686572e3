//! The Server-Sent Events parser (`crate/api/endpoint/sse.rs`) on any bytes, cut anywhere: it
//! never panics, and the events it gives do not depend on where the reads were cut (the first
//! byte chooses a cut; the stream fed whole, then in two reads, then a byte at a time).
#![no_main]

use libfuzzer_sys::fuzz_target;
use tokenometer_fuzz::sse::SseParser;

fn events(reads: &[&[u8]]) -> Result<Vec<tokenometer_fuzz::sse::SseEvent>, String> {
    let mut parser = SseParser::new();
    let mut out = Vec::new();
    for read in reads {
        out.extend(parser.feed(read)?);
    }
    out.extend(parser.finish());
    Ok(out)
}

fuzz_target!(|data: &[u8]| {
    let Some((&cut, stream)) = data.split_first() else {
        return;
    };
    let cut = (cut as usize).min(stream.len());
    let whole = events(&[stream]);
    let halves = events(&[&stream[..cut], &stream[cut..]]);
    let bytes: Vec<&[u8]> = stream.chunks(1).collect();
    let one_by_one = events(&bytes);
    assert_eq!(whole, halves);
    assert_eq!(whole, one_by_one);
});
