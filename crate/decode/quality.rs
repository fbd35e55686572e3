//! What a quantization costs in quality, beside what it gains in speed: a continuation scored
//! teacher-forced ([`Engine::score`]: per position our choice and the log-probabilities of the
//! given token and of ours), and perplexity over a text as llama.cpp's `llama-perplexity` defines
//! it ([`Engine::perplexity`]). Neither depends on where two engines' greedy runs happen to part.

use serde::Serialize;

use crate::decode::engine::Engine;
use crate::error::{Error, Result};

/// One position of a scored continuation.
#[derive(Debug, Clone, Serialize)]
pub struct Scored {
    /// The continuation's position, from 0.
    pub position: usize,
    /// The given token, and its log-probability (natural log) under the model.
    pub id: u32,
    pub logprob: f64,
    /// Our choice there (the first of equal maxima), and its log-probability.
    pub argmax: u32,
    pub argmax_logprob: f64,
}

/// Perplexity over a text, as llama.cpp's `llama-perplexity` computes it (its default, no
/// stride): the tokens (BOS first where the vocabulary adds it) in windows of `ctx`, each window's
/// first token replaced by BOS, and only each window's second half scored, so that every scored
/// token has at least `ctx / 2` tokens before it.
#[derive(Debug, Clone, Serialize)]
pub struct Perplexity {
    pub ctx: usize,
    /// Windows run, and tokens scored in all (`ctx - 1 - ctx / 2` a window).
    pub chunks: usize,
    pub scored: usize,
    /// `exp` of the mean negative log-likelihood, its standard error as llama.cpp gives it
    /// (`ppl * sqrt(var(nll) / (n - 1))`), and the estimate after each window.
    pub ppl: f64,
    pub ppl_stderr: f64,
    pub running: Vec<f64>,
    /// How many tokens the text was, and how many the whole windows left unread at its end.
    pub tokens: usize,
    pub unread: usize,
}

/// Logit rows read back at once: 64 rows of Gemma 3's 262,144-token vocabulary are 64 MiB.
const ROWS_AT_ONCE: usize = 64;

/// `ln softmax(row)[id]` as llama.cpp's perplexity computes it: exponentials in f32 from the
/// row's maximum, summed in f64.
fn log_softmax(row: &[f32], id: usize) -> f64 {
    let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let sum: f64 = row.iter().map(|&l| f64::from((l - max).exp())).sum();
    f64::from(row[id] - max) - sum.ln()
}

/// The first index of the row's maximum.
fn argmax(row: &[f32]) -> usize {
    let mut best = 0;
    for (i, &v) in row.iter().enumerate() {
        if v > row[best] {
            best = i;
        }
    }
    best
}

impl Engine {
    fn check_ids(&self, ids: &[u32], what: &str) -> Result<()> {
        let vocab = self.model.config.vocab_size;
        match ids.iter().find(|&&id| id as usize >= vocab) {
            Some(id) => Err(Error::BadPrompt(format!(
                "{what} holds id {id}, outside the model's vocabulary of {vocab}"
            ))),
            None => Ok(()),
        }
    }

    /// `ids` scored after `prompt` (ids as they are: no template, no BOS added), teacher-forced
    /// in one pass.
    pub async fn score(&self, prompt: &[u32], ids: &[u32]) -> Result<Vec<Scored>> {
        if prompt.is_empty() || ids.is_empty() {
            return Err(Error::BadPrompt(
                "give at least one prompt id and one id to score".into(),
            ));
        }
        self.check_ids(prompt, "--prompt-ids")?;
        self.check_ids(ids, "--ids")?;
        let context = self.model.config.seq_len;
        if prompt.len() + ids.len() > context {
            return Err(Error::BadPrompt(format!(
                "the prompt and the ids are {} tokens but the context holds {context}",
                prompt.len() + ids.len()
            )));
        }
        let all: Vec<u32> = prompt.iter().chain(ids).copied().collect();
        let logits = self
            .logits_along(&all[..all.len() - 1], prompt.len() - 1)
            .await?;
        let vocab = logits.len() / ids.len();
        Ok(ids
            .iter()
            .zip(logits.chunks_exact(vocab))
            .enumerate()
            .map(|(position, (&id, row))| {
                let best = argmax(row);
                Scored {
                    position,
                    id,
                    logprob: log_softmax(row, id as usize),
                    argmax: best as u32,
                    argmax_logprob: log_softmax(row, best),
                }
            })
            .collect())
    }

    /// Perplexity of `text` in windows of `ctx` tokens (see [`Perplexity`]); `on_window` hears
    /// the estimate after each window (1-based).
    pub async fn perplexity(
        &self,
        text: &str,
        ctx: usize,
        on_window: &mut dyn FnMut(usize, f64),
    ) -> Result<Perplexity> {
        let context = self.model.config.seq_len;
        if !(8..=context).contains(&ctx) {
            return Err(Error::Unsupported(format!(
                "--ctx {ctx} is out of range: a perplexity window is 8 to {context} tokens (the \
                 model's context)"
            )));
        }
        let tokens = self.tokenizer.encode(text)?;
        self.check_ids(&tokens, "the text")?;
        if tokens.len() < 2 * ctx {
            return Err(Error::BadPrompt(format!(
                "the text is {}; perplexity with --ctx {ctx} needs at least {} (a longer file, or \
                 a smaller --ctx)",
                crate::error::count(tokens.len(), "token"),
                2 * ctx
            )));
        }
        let bos = self
            .tokenizer
            .specials
            .bos
            .filter(|_| self.tokenizer.specials.add_bos);
        let first = ctx / 2;
        let chunks = tokens.len() / ctx;
        let (mut nll, mut nll2, mut scored) = (0.0f64, 0.0f64, 0usize);
        let mut running = Vec::with_capacity(chunks);
        for chunk in 0..chunks {
            let mut window = tokens[chunk * ctx..(chunk + 1) * ctx].to_vec();
            if let Some(bos) = bos {
                window[0] = bos;
            }
            let mut cache = self.model.new_cache();
            self.model.forward(&window[..first], &mut cache, false);
            // Rows first..ctx - 1 each predict the next token of the window.
            let mut at = first;
            while at < ctx - 1 {
                let end = (at + ROWS_AT_ONCE).min(ctx - 1);
                let logits = self.model.forward(&window[at..end], &mut cache, true);
                let rows = logits.into_vec().await?;
                let vocab = rows.len() / (end - at);
                for (row, &next) in rows.chunks_exact(vocab).zip(&window[at + 1..=end]) {
                    let v = -log_softmax(row, next as usize);
                    nll += v;
                    nll2 += v * v;
                }
                at = end;
            }
            scored += ctx - 1 - first;
            let estimate = (nll / scored as f64).exp();
            running.push(estimate);
            on_window(chunk + 1, estimate);
        }
        let mean = nll / scored as f64;
        let variance = nll2 / scored as f64 - mean * mean;
        let ppl = mean.exp();
        Ok(Perplexity {
            ctx,
            chunks,
            scored,
            ppl,
            ppl_stderr: ppl * (variance.max(0.0) / (scored - 1) as f64).sqrt(),
            running,
            tokens: tokens.len(),
            unread: tokens.len() - chunks * ctx,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_softmax_is_the_log_of_a_distribution() {
        let row = [1.0f32, 2.0, 3.0, -1.0];
        let total: f64 = (0..4).map(|i| log_softmax(&row, i).exp()).sum();
        // The exponentials are f32, as llama.cpp's.
        assert!((total - 1.0).abs() < 1e-6, "{total}");
        assert!((log_softmax(&[0.0, 0.0], 1) - 0.5f64.ln()).abs() < 1e-12);
        assert_eq!(argmax(&[1.0, 3.0, 3.0, 2.0]), 1);
    }
}
