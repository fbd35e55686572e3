//! Speculative decoding: a cheap drafter proposes the next few tokens, and the model checks them
//! all in ONE forward pass (logits at every drafted position, through the batched path), keeping
//! the longest prefix it would have produced itself, plus its own next token. Each weight is then
//! read once for several tokens, and the output is what plain decoding gives:
//!
//! - greedy: a draft is kept while it is the model's argmax, so the text is plain greedy's, token
//!   for token (the batched pass gives the very logits of one-token passes on the CPU:
//!   `tests/speculate.rs`);
//! - sampling (temperature above 0): the standard rejection rule (Leviathan et al. 2023; Chen et
//!   al. 2023): draft `d` with the drafter's probability `q(d)` is kept with probability
//!   `min(1, p(d) / q(d))`, where `p` is the model's distribution (after temperature and top-p);
//!   on a rejection the token is drawn from `max(0, p - q)` normalized. Every output token is then
//!   distributed as `p`, whatever the drafter proposed.
//!
//! Rejected drafts' keys and values are dropped from the cache (`KvCache::truncate`).
//!
//! Two drafters: `lookup` (prompt-lookup decoding: the tokens that followed the last time the
//! latest n-gram appeared, in the prompt or the output) and `draft:MODEL` (a smaller or
//! lower-precision model with the same vocabulary, run ahead with its own cache). Both adapt how
//! many tokens they draft: the length grows while drafts are all kept and falls back to one more
//! than were kept after a rejection; after two or more verifications in a row that kept nothing
//! they pause, for 2, 4, ... up to 16 steps (plain decoding), since a rejected draft costs a
//! wider pass and gives nothing. Measured on SmolLM2 Q8_0 with a creative prompt, before the
//! pause: lookup kept 5% of its drafts and decoded at 0.78-1.01x plain decoding.

use std::sync::Arc;

use crate::backend::KvCache;
use crate::decode::engine::Engine;
use crate::decode::sampling::{Sampler, Sampling};
use crate::error::{Error, Result};

/// Where drafts come from.
#[derive(Clone)]
pub enum DraftSource {
    /// n-grams of the prompt and the output so far.
    Lookup,
    /// Another model with the same vocabulary (named for the conditions line).
    Model { engine: Arc<Engine>, name: String },
}

/// How a run speculates.
#[derive(Clone)]
pub struct Speculation {
    pub source: DraftSource,
    /// The longest draft verified in one pass.
    pub max_draft: usize,
    /// `lookup`: the longest n-gram matched (shorter ones are tried after it, down to one token).
    pub ngram: usize,
}

/// The longest draft by default. A verification's cost grows with its rows, and how fast depends
/// on the machine's arithmetic: natively (AVX-512 VNNI, SmolLM2 Q8_0, the grounded prompt of
/// `tests/bench/speculate.sh`) 8 drafts gave 2.0x plain decoding; in the page (wasm SIMD128,
/// compute-bound: a pass of 9 rows costs nearly 9 of one), lookup with drafts up to 2, 3, 4 and 8
/// gave 1.11, 1.14, 1.02 and 0.98x (Q8_0, 1 thread) and up to 3 and 4 gave 1.32 and 1.31x (Q4_0,
/// 2 threads), so 3 there.
pub const DEFAULT_MAX_DRAFT: usize = if cfg!(target_arch = "wasm32") { 3 } else { 8 };
/// The longest n-gram `lookup` matches by default.
pub const DEFAULT_NGRAM: usize = 3;

impl Speculation {
    pub fn lookup() -> Speculation {
        Speculation {
            source: DraftSource::Lookup,
            max_draft: DEFAULT_MAX_DRAFT,
            ngram: DEFAULT_NGRAM,
        }
    }

    /// Drafts from `draft`, which must share `target`'s vocabulary.
    pub fn draft_model(target: &Engine, draft: Engine, name: String) -> Result<Speculation> {
        Speculation::shared_draft(target, Arc::new(draft), name)
    }

    /// [`draft_model`](Self::draft_model) with a draft model held elsewhere too (the page's
    /// session keeps one for its runs).
    pub fn shared_draft(target: &Engine, draft: Arc<Engine>, name: String) -> Result<Speculation> {
        let (ours, theirs) = (
            target.model.config.vocab_size,
            draft.model.config.vocab_size,
        );
        if ours != theirs || target.tokenizer.vocab_size() != draft.tokenizer.vocab_size() {
            return Err(Error::Unsupported(format!(
                "the draft model {name} has a vocabulary of {theirs} tokens and the model {ours}: \
                 a draft model must share the model's tokenizer"
            )));
        }
        Ok(Speculation {
            source: DraftSource::Model {
                engine: draft,
                name,
            },
            max_draft: DEFAULT_MAX_DRAFT,
            ngram: DEFAULT_NGRAM,
        })
    }

    /// A sentence saying why these settings cannot run, if they cannot.
    pub fn validate(&self) -> Result<()> {
        if self.max_draft == 0 || self.max_draft > 64 {
            return Err(Error::Unsupported(format!(
                "the longest draft is {}: choose 1 to 64 tokens",
                self.max_draft
            )));
        }
        if self.ngram == 0 || self.ngram > 16 {
            return Err(Error::Unsupported(format!(
                "the lookup n-gram is {}: choose 1 to 16 tokens",
                self.ngram
            )));
        }
        Ok(())
    }

    /// For the conditions line: "speculative: prompt lookup (n-grams up to 3, drafts up to 8)".
    pub fn describe(&self) -> String {
        match &self.source {
            DraftSource::Lookup => format!(
                "speculative: prompt lookup (n-grams up to {}, drafts up to {})",
                self.ngram, self.max_draft
            ),
            DraftSource::Model { name, .. } => format!(
                "speculative: draft model {name} (drafts up to {})",
                self.max_draft
            ),
        }
    }
}

/// One sequence's drafter: the settings, the draft length it has come to, and a draft model's
/// own cache and sampler.
pub struct Drafter {
    spec: Speculation,
    length: usize,
    /// Verifications in a row that kept nothing, and the steps left to pause for.
    misses: u32,
    pause: usize,
    model: Option<DraftState>,
}

/// The longest pause from drafting after misses, in steps.
const MAX_PAUSE: usize = 16;

/// A verification that keeps less than this share of its drafts is a miss. Natively only one that
/// keeps none: a wider pass costs little more than one row there. In wasm a pass's rows cost
/// nearly a row each (compute-bound 128-bit SIMD: 2 of 3 drafts kept is 3 tokens for the cost of
/// about 3.5 passes), so a draft pays only when most of it is kept. Measured in the page on
/// SmolLM2 with lookup, interleaved against plain decoding (docs/measurements.md): with only empty
/// verifications as misses a creative prompt (Q4_0, 42% of drafts kept) ran at 0.85-0.89x; with
/// this 0.5, 0.86 and 0.92x (1 thread) and the grounded prompt 1.23-1.37x (2 threads); with 1.0
/// (only a draft kept whole a hit) 0.90x creative but 0.89-1.27x grounded, within the noise.
const MIN_KEPT: f64 = if cfg!(target_arch = "wasm32") {
    0.5
} else {
    0.0
};

struct DraftState {
    engine: Arc<Engine>,
    cache: KvCache,
    sampler: Sampler,
}

/// A draft: the proposed tokens, and for a draft model at temperature above 0 the distribution
/// each was drawn from (a lookup's drafts are certain: `None`). The default drafts nothing.
#[derive(Default)]
pub struct Draft {
    pub tokens: Vec<u32>,
    pub probs: Option<Vec<Vec<f32>>>,
    /// The draft model's forward passes for it.
    pub passes: usize,
}

impl Drafter {
    pub fn new(spec: Speculation, sampling: Sampling) -> Drafter {
        let model = match &spec.source {
            DraftSource::Lookup => None,
            DraftSource::Model { engine, .. } => Some(DraftState {
                engine: engine.clone(),
                cache: engine.model.new_cache(),
                // Its own stream of random numbers, so the model's is the same with or without it.
                sampler: Sampler::new(Sampling {
                    seed: sampling.seed.wrapping_add(0x9E37_79B9),
                    ..sampling
                }),
            }),
        };
        Drafter {
            length: spec.max_draft,
            misses: 0,
            pause: 0,
            spec,
            model,
        }
    }

    /// How many tokens the next draft may hold.
    pub fn length(&self) -> usize {
        self.length
    }

    /// Draft up to `n` tokens to follow `history` (the prompt and every token so far, the last
    /// one not yet run through the model).
    pub async fn draft(&mut self, history: &[u32], n: usize) -> Result<Draft> {
        let n = if self.pause > 0 {
            self.pause -= 1;
            0
        } else {
            n.min(self.length)
        };
        if n == 0 {
            return Ok(Draft::default());
        }
        match &mut self.model {
            None => Ok(Draft {
                tokens: lookup(history, self.spec.ngram, n),
                ..Draft::default()
            }),
            Some(state) => state.draft(history, n).await,
        }
    }

    /// Learn from a verification: `accepted` of `drafted` kept. The length grows by one while
    /// every draft is kept, and otherwise falls to one more than were kept; from the second miss
    /// in a row (a verification that kept nothing, or in wasm less than half, `MIN_KEPT`)
    /// drafting pauses, twice as long each time.
    pub fn verified(&mut self, drafted: usize, accepted: usize) {
        if drafted == 0 {
            return;
        }
        if accepted == 0 || (accepted as f64) < MIN_KEPT * drafted as f64 {
            self.misses += 1;
            if self.misses >= 2 {
                self.pause = (1usize << (self.misses - 1).min(8)).min(MAX_PAUSE);
            }
        } else {
            self.misses = 0;
        }
        self.length = if accepted == drafted {
            (self.length + 1).min(self.spec.max_draft)
        } else {
            (accepted + 1).min(self.spec.max_draft)
        };
    }
}

impl DraftState {
    /// Run the draft model over the history it has not seen, then `n` tokens ahead of it.
    async fn draft(&mut self, history: &[u32], n: usize) -> Result<Draft> {
        let model = &self.engine.model;
        let context = model.config.seq_len;
        // Its cache keeps what was verified; what the model went on to say is run now.
        let seen = self.cache.len().min(history.len() - 1);
        self.cache.truncate(seen);
        let room = context.saturating_sub(history.len());
        let n = n.min(room);
        if n == 0 {
            return Ok(Draft::default());
        }
        let greedy = self.sampler.is_greedy();
        let mut tokens = Vec::with_capacity(n);
        let mut probs = Vec::new();
        let mut logits = model.forward(&history[seen..], &mut self.cache, false);
        let mut passes = 1;
        loop {
            let next = if greedy {
                logits.argmax().await?[0]
            } else {
                let row = logits.into_vec().await?;
                let p = self.sampler.distribution(&row);
                let id = self.sampler.pick(&p);
                probs.push(p);
                id
            };
            tokens.push(next);
            if tokens.len() == n {
                break;
            }
            logits = model.forward(&[next], &mut self.cache, false);
            passes += 1;
        }
        Ok(Draft {
            tokens,
            probs: (!greedy).then_some(probs),
            passes,
        })
    }
}

/// Prompt-lookup drafting: find the latest earlier place where the last `k` tokens of `history`
/// appeared (`k` from `ngram` down to 1) and propose up to `n` of the tokens that followed it.
pub fn lookup(history: &[u32], ngram: usize, n: usize) -> Vec<u32> {
    let len = history.len();
    for k in (1..=ngram.min(len.saturating_sub(1))).rev() {
        let tail = &history[len - k..];
        // Matches ending before the tail itself, latest first.
        for start in (0..len - k).rev() {
            if &history[start..start + k] == tail {
                let from = start + k;
                let to = (from + n).min(len);
                return history[from..to].to_vec();
            }
        }
    }
    Vec::new()
}

/// What the model keeps of a draft at temperature 0: drafts while each is the model's argmax,
/// `ids[i]` being the argmax of the row after the input and `i` drafts. Returns how many drafts
/// are kept and the model's own next token after them.
pub fn accept_greedy(drafts: &[u32], ids: &[u32]) -> (usize, u32) {
    let kept = drafts.iter().zip(ids).take_while(|(d, t)| d == t).count();
    (kept, ids[kept])
}

/// What the model keeps of a draft at temperature above 0, by the rejection rule: `rows` holds
/// the model's logits after the input and after each draft (`drafts.len() + 1` rows of `vocab`),
/// `probs` the drafter's distributions (`None`: certain drafts). Returns how many drafts are kept
/// and the next token (drawn from the residual after a rejection, or from the last row).
pub fn accept_sampled(
    sampler: &mut Sampler,
    drafts: &[u32],
    probs: Option<&[Vec<f32>]>,
    rows: &[f32],
    vocab: usize,
) -> (usize, u32) {
    for (i, &d) in drafts.iter().enumerate() {
        let p = sampler.distribution(&rows[i * vocab..(i + 1) * vocab]);
        let q = probs.map(|q| q[i].as_slice());
        let (pd, qd) = (p[d as usize], q.map_or(1.0, |q| q[d as usize]));
        if qd > 0.0 && sampler.coin() < (pd / qd).min(1.0) {
            continue;
        }
        // Rejected: the residual max(0, p - q), where a certain draft's q is all on `d`.
        let residual: Vec<f32> = match q {
            Some(q) => p.iter().zip(q).map(|(p, q)| (p - q).max(0.0)).collect(),
            None => {
                let mut r = p.clone();
                r[d as usize] = 0.0;
                r
            }
        };
        let id = if residual.iter().sum::<f32>() > 0.0 {
            sampler.pick(&residual)
        } else {
            sampler.pick(&p)
        };
        return (i, id);
    }
    let k = drafts.len();
    let p = sampler.distribution(&rows[k * vocab..(k + 1) * vocab]);
    (k, sampler.pick(&p))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookup_proposes_what_followed_the_latest_match_of_the_longest_ngram() {
        // "a b c d a b c" then: "a b c" last appeared at 0, followed by "d a b c".
        let h = [1, 2, 3, 4, 1, 2, 3];
        assert_eq!(lookup(&h, 3, 2), vec![4, 1]);
        assert_eq!(lookup(&h, 3, 8), vec![4, 1, 2, 3]);
        // The latest match wins: "x 5" twice, followed by 6 then by 7.
        assert_eq!(lookup(&[9, 5, 6, 9, 5, 7, 9, 5], 2, 1), vec![7]);
        // Back off to shorter n-grams, down to one token; nothing when nothing matches.
        assert_eq!(lookup(&[1, 2, 3, 7, 3], 3, 2), vec![7, 3]);
        assert_eq!(lookup(&[1, 2, 3], 3, 4), Vec::<u32>::new());
        assert_eq!(lookup(&[1], 3, 4), Vec::<u32>::new());
    }

    #[test]
    fn greedy_keeps_the_drafts_the_model_would_have_chosen() {
        assert_eq!(accept_greedy(&[5, 6, 7], &[5, 6, 8, 9]), (2, 8));
        assert_eq!(accept_greedy(&[5, 6], &[5, 6, 1]), (2, 1));
        assert_eq!(accept_greedy(&[5], &[4, 0]), (0, 4));
        assert_eq!(accept_greedy(&[], &[3]), (0, 3));
    }

    /// Whatever the drafter proposes, each token the rule gives is distributed as the model's
    /// distribution: a certain draft of the model's second choice, and a draft model whose `q`
    /// differs from `p`, each over 20,000 trials.
    #[test]
    fn rejection_sampling_keeps_the_model_s_distribution() {
        let sampling = Sampling {
            temperature: 1.0,
            top_p: 1.0,
            seed: 3,
        };
        let logits = [0.0f32, 1.0, 2.0, 0.5];
        let mut sampler = Sampler::new(sampling);
        let p = sampler.distribution(&logits);
        let q = vec![0.1f32, 0.6, 0.1, 0.2];
        for probs in [None, Some(vec![q.clone()])] {
            let trials = 20_000;
            let mut counts = [0usize; 4];
            for _ in 0..trials {
                // The first output token: the kept draft, or the token drawn after a rejection.
                let draft = match &probs {
                    None => 1,
                    Some(q) => sampler.pick(&q[0]),
                };
                let rows: Vec<f32> = logits.iter().chain(&logits).copied().collect();
                let (kept, next) =
                    accept_sampled(&mut sampler, &[draft], probs.as_deref(), &rows, 4);
                counts[if kept == 1 { draft } else { next } as usize] += 1;
            }
            for (i, &c) in counts.iter().enumerate() {
                let seen = c as f32 / trials as f32;
                assert!(
                    (seen - p[i]).abs() < 0.015,
                    "{i}: {seen} vs {} ({probs:?})",
                    p[i]
                );
            }
        }
    }

    #[test]
    fn the_draft_length_grows_while_drafts_are_kept_and_falls_after_a_rejection() {
        let mut spec = Speculation::lookup();
        spec.max_draft = 4;
        let mut drafter = Drafter::new(spec, Sampling::default());
        assert_eq!(drafter.length(), 4);
        drafter.verified(4, 1);
        assert_eq!(drafter.length(), 2);
        drafter.verified(2, 2);
        assert_eq!(drafter.length(), 3);
        drafter.verified(3, 3);
        drafter.verified(4, 4);
        assert_eq!(drafter.length(), 4);
        drafter.verified(0, 0);
        assert_eq!(drafter.length(), 4);
        drafter.verified(4, 0);
        assert_eq!(drafter.length(), 1);
    }

    /// Misses in a row pause drafting for 2, 4, 8, 16, 16 steps; a kept draft ends the pausing.
    #[test]
    fn drafting_pauses_after_misses_in_a_row() {
        let history = [1, 2, 3, 1, 2];
        let mut drafter = Drafter::new(Speculation::lookup(), Sampling::default());
        let drafts = |drafter: &mut Drafter| {
            futures_lite::future::block_on(drafter.draft(&history, 4))
                .unwrap()
                .tokens
                .len()
        };
        assert_eq!(drafts(&mut drafter), 3);
        drafter.verified(3, 0);
        assert_eq!(drafts(&mut drafter), 1);
        for pause in [2, 4, 8, 16, 16] {
            drafter.verified(1, 0);
            for _ in 0..pause {
                assert_eq!(drafts(&mut drafter), 0);
            }
            assert_eq!(drafts(&mut drafter), 1);
        }
        drafter.verified(1, 1);
        drafter.verified(2, 0);
        assert_eq!(drafts(&mut drafter), 1);
    }
}
