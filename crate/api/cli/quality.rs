//! `tokenometer score` and `tokenometer perplexity`: what a quantization costs in quality, printed
//! from the engine's own figures (`decode/quality.rs`).

use std::path::Path;

use crate::decode::Engine;
use crate::error::Error;

/// Token ids separated by spaces or commas.
fn ids(text: &str, flag: &str) -> Result<Vec<u32>, Error> {
    text.split([' ', ',', '\t', '\n'])
        .filter(|t| !t.is_empty())
        .map(|t| {
            t.parse().map_err(|_| {
                Error::BadPrompt(format!(
                    "{flag}: {t:?} is not a token id (ids are 0 or more)"
                ))
            })
        })
        .collect()
}

/// The conditions the figures hold for: model, quantization, backend and its adapter.
fn conditions(engine: &Engine) -> String {
    let info = &engine.info;
    format!(
        "{}, {}, on {} [{}]",
        info.name, info.quant, info.backend, info.adapter
    )
}

pub(super) async fn score(
    engine: &Engine,
    prompt_ids: &str,
    continuation: &str,
    json: bool,
) -> Result<(), Error> {
    let prompt = ids(prompt_ids, "--prompt-ids")?;
    let given = ids(continuation, "--ids")?;
    let scored = engine.score(&prompt, &given).await?;
    if json {
        for s in &scored {
            println!("{}", serde_json::to_string(s).expect("plain numbers"));
        }
        return Ok(());
    }
    println!("position      id   logprob   ours   ours' logprob");
    for s in &scored {
        let mark = if s.id == s.argmax { "" } else { "  (differs)" };
        println!(
            "{:>8} {:>7} {:>9.4} {:>6} {:>15.4}{mark}",
            s.position, s.id, s.logprob, s.argmax, s.argmax_logprob
        );
    }
    let same = scored.iter().filter(|s| s.id == s.argmax).count();
    let mean: f64 = scored.iter().map(|s| s.logprob).sum::<f64>() / scored.len() as f64;
    println!(
        "{same} of {} positions our choice is the given id; mean log-probability of the given ids {mean:.4} ({})",
        scored.len(),
        conditions(engine)
    );
    Ok(())
}

/// The most text `perplexity` reads: 64 MiB is about 16 million tokens, days of windows on a CPU
/// (wikitext-2's test set, the usual one, is 1.3 MB).
const MOST_TEXT: u64 = 64 << 20;

/// `perplexity`'s text, its size checked before it is read (and before the model loads).
pub(super) fn read_text(file: &Path) -> Result<String, Error> {
    let io = |e: std::io::Error| Error::Io(format!("{}: {e}", file.display()));
    let size = std::fs::metadata(file).map_err(io)?.len();
    if size > MOST_TEXT {
        return Err(Error::Io(format!(
            "{}: {} MiB of text, over the {} MiB perplexity reads; give a part of it",
            file.display(),
            size >> 20,
            MOST_TEXT >> 20
        )));
    }
    std::fs::read_to_string(file).map_err(io)
}

pub(super) async fn perplexity(
    engine: &Engine,
    text: &str,
    ctx: usize,
    json: bool,
) -> Result<(), Error> {
    let mut line = String::new();
    let result = engine
        .perplexity(text, ctx, &mut |window, estimate| {
            if !json {
                line.push_str(&format!("[{window}]{estimate:.4},"));
                eprint!("[{window}]{estimate:.4},");
            }
        })
        .await?;
    if json {
        println!("{}", serde_json::to_string(&result).expect("plain numbers"));
        return Ok(());
    }
    eprintln!();
    println!(
        "perplexity {:.4} +/- {:.5} over {} tokens scored in {} windows of {ctx} ({} tokens in the \
         text, {} past the last whole window unread; {})",
        result.ppl,
        result.ppl_stderr,
        result.scored,
        result.chunks,
        result.tokens,
        result.unread,
        conditions(engine)
    );
    Ok(())
}
