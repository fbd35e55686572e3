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
//! lower-precision model with the same vocabulary, run ahead with its own cache). How many tokens
//! to draft is chosen each step from what the run has measured (`Drafter::choose`): the time of
//! its steps by how many drafts they verified, and the share of drafts kept. A draft of `d` is
//! worth `1 + a + ... + a^d` tokens (kept drafts stop at the first rejected one; `a` the chance
//! that a draft is kept) for a step that costs `ms(d)`, so the drafter takes the `d` (0 to the
//! longest allowed) with the most tokens a millisecond. Measured on SmolLM2 Q8_0, 1 thread: natively
//! (AVX-512 VNNI) a pass of 2 rows cost 1.2 passes of one and 4 rows 1.5, so drafts are long
//! whenever some are kept; in the page (128-bit SIMD, compute-bound) a step with 1 draft cost 1.55
//! plain steps and with 2 drafts 2.3, so it is one draft while most are kept and none when few are.
//! There lookup with drafts of 1 gave 1.26x plain decoding on a grounded prompt where drafts up to
//! 3 gave 1.22x, and the hand-tuned rule this replaced (a length growing while drafts are kept,
//! pauses after misses) 0.86-0.92x on a creative prompt (docs/measurements.md).

use std::sync::Arc;

use crate::backend::KvCache;
use crate::decode::engine::{Engine, ms_since};
use crate::decode::sampling::{Sampler, Sampling};
use crate::error::{Error, Result, clip_to};
use crate::loading::tokenizer::Tokenizer;

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
    /// Always draft as many as `max_draft` (as many as the drafter has), instead of the length
    /// the measured costs favour: for tests of every length, and to see what drafting every step
    /// costs.
    pub fixed: bool,
}

/// The longest draft by default; the drafter drafts fewer where the measured costs say so. Natively
/// (AVX-512 VNNI, SmolLM2 Q8_0, the grounded prompt of `tests/bench/speculate.sh`) 8 drafts gave
/// 2.0x plain decoding.
pub const DEFAULT_MAX_DRAFT: usize = 8;
/// The longest n-gram `lookup` matches by default.
pub const DEFAULT_NGRAM: usize = 3;

impl Speculation {
    pub fn lookup() -> Speculation {
        Speculation {
            source: DraftSource::Lookup,
            max_draft: DEFAULT_MAX_DRAFT,
            ngram: DEFAULT_NGRAM,
            fixed: false,
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
        // The same count of tokens is not the same tokens: a draft's ids would mean other text.
        if let Some(id) = target.tokenizer.first_difference(&draft.tokenizer) {
            let show = |t: &Tokenizer| clip_to(&format!("{:?}", t.piece_text(id)), 32);
            return Err(Error::Unsupported(format!(
                "the draft model {name} has as many tokens as the model but not the same ones \
                 (token {id} is {} there, {} here): a draft model must share the model's tokenizer",
                show(&draft.tokenizer),
                show(&target.tokenizer)
            )));
        }
        Ok(Speculation {
            source: DraftSource::Model {
                engine: draft,
                name,
            },
            max_draft: DEFAULT_MAX_DRAFT,
            ngram: DEFAULT_NGRAM,
            fixed: false,
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

    /// For the conditions line: "speculative: prompt lookup (n-grams up to 3, drafts up to 8, as
    /// measured costs favour)".
    pub fn describe(&self) -> String {
        let lengths = if self.fixed {
            format!("{} drafts a step, fixed", self.max_draft)
        } else {
            format!("drafts up to {}, as measured costs favour", self.max_draft)
        };
        match &self.source {
            DraftSource::Lookup => format!(
                "speculative: prompt lookup (n-grams up to {}, {lengths})",
                self.ngram
            ),
            DraftSource::Model { name, .. } => {
                format!("speculative: draft model {name} ({lengths})")
            }
        }
    }
}

/// One sequence's drafter: the settings, what it has measured (its steps' times by how many drafts
/// they verified, the drafts kept), and a draft model's own cache and sampler.
pub struct Drafter {
    spec: Speculation,
    /// A step's time in ms by how many drafts it verified (an average of the latest steps), and
    /// the step it was last timed at: `None` until timed.
    step_ms: Vec<Option<(f64, usize)>>,
    /// Steps so far.
    steps: usize,
    /// Drafts kept, and drafts judged (every kept one and the first rejected one of each
    /// verification), each step's evidence weighted down by [`FORGET`] a step; for lookup by the
    /// length of the n-gram the draft followed (`[k - 1]`: a draft after a 3-token match is kept
    /// far more often than one after a single token), for a draft model one count.
    kept: Vec<f64>,
    judged: Vec<f64>,
    /// Which of those counts the latest draft belongs to.
    class: usize,
    /// A draft model's time to catch up, a token of history it had not seen (an average; 0 until
    /// timed), and the tokens caught up in the latest draft.
    catch_up_ms: f64,
    caught_up: usize,
    model: Option<DraftState>,
}

/// The share of drafts kept before any is judged, and how many drafts' worth of evidence it
/// counts as.
const PRIOR_KEPT: f64 = 0.6;
const PRIOR_WEIGHT: f64 = 1.0;
/// Each step, the evidence of drafts kept and judged is multiplied by this, so the share follows
/// the text (a preamble then a copied paragraph) and, after drafting stopped for lack of kept
/// drafts, the prior slowly wins again and a draft is tried: the more evidence, the later (a unit
/// test: 133 steps after 8 kept drafts then 20 misses, where a drafted row costs 0.4 of a step).
const FORGET: f64 = 0.97;
/// A new time's weight in a length's average, and the most a single time may be above the
/// average (a pause of the machine, a collection, is not the length's cost).
const NEW_TIME: f64 = 0.25;
const MOST_ABOVE: f64 = 1.5;
/// A plain step's time older than this many steps is taken again, so that the costs follow the
/// machine; a draft length's time is replaced, not averaged, when it is timed again after this
/// long. (Timing every length again once stale made SmolLM2's Q4_1 file, drafting for its Q8_0
/// one, try a draft every 32 steps, each costing a catch-up of the draft model: 0.6-0.8x plain.)
const STALE_STEPS: usize = 32;

/// The tokens a draft of `d` is worth on average, when each draft is kept with chance `a` until
/// the first rejected one: the kept drafts and the model's own token, `1 + a + ... + a^d`.
pub fn expected_tokens(a: f64, d: usize) -> f64 {
    (0..=d).map(|i| a.powi(i as i32)).sum()
}

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
    /// The time the draft model took to catch up on the history it had not seen after steps
    /// without drafts (more than the last two tokens): the price of drafting again, not of this
    /// draft's length, so the drafter prices it apart. (The prompt is read in the prefill,
    /// [`Drafter::prefill`].)
    pub catch_up_ms: f64,
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
        let classes = if model.is_some() { 1 } else { spec.ngram };
        Drafter {
            step_ms: vec![None; spec.max_draft + 1],
            steps: 0,
            kept: vec![0.0; classes],
            judged: vec![0.0; classes],
            class: 0,
            catch_up_ms: 0.0,
            caught_up: 0,
            spec,
            model,
        }
    }

    /// The share of drafts kept, as the drafter estimates it now, for drafts of `class` (lookup:
    /// after an n-gram of `class + 1` tokens).
    pub fn kept_share(&self, class: usize) -> f64 {
        (self.kept[class] + PRIOR_KEPT * PRIOR_WEIGHT) / (self.judged[class] + PRIOR_WEIGHT)
    }

    /// The time of a step verifying `d` drafts: as timed, or where it was not, between the
    /// nearest timed lengths on either side, or beyond the longest timed ones (the cost a draft
    /// of the last two). `None` until a step without drafts and one with have been timed (a plain
    /// one lately).
    pub fn step_cost(&self, d: usize) -> Option<f64> {
        // A plain step's time goes stale (one is timed again); a draft length's stays the best
        // there is until that length is chosen again.
        let fresh = |e: usize| {
            self.step_ms[e]
                .filter(|&(_, at)| e > 0 || self.steps - at <= STALE_STEPS)
                .map(|(ms, _)| (e, ms))
        };
        if let Some((_, ms)) = fresh(d) {
            return Some(ms);
        }
        let mut below = (0..d).rev().filter_map(fresh);
        let (e, ms) = below.next()?;
        if let Some((f, longer)) = (d + 1..self.step_ms.len()).find_map(fresh) {
            return Some(ms + (longer - ms) * (d - e) as f64 / (f - e) as f64);
        }
        let (f, shorter) = below.next()?;
        let row = ((ms - shorter) / (e - f) as f64).max(0.0);
        Some(ms + row * (d - e) as f64)
    }

    /// How many of up to `most` drafts of `class` to verify next: the length with the most tokens
    /// a millisecond ([`expected_tokens`] over [`step_cost`](Self::step_cost)), the shorter one
    /// on a tie; none while a step without drafts is to be timed, and one the first time drafts
    /// are to be had (what a draft costs is not known before one is timed: a row of the page's
    /// verification costs 0.55 of a step, a native one 0.2, a draft model's token its own pass).
    /// `fixed`: `most`.
    pub fn choose(&self, most: usize, class: usize) -> usize {
        self.choose_behind(most, class, 0.0)
    }

    /// [`choose`](Self::choose), a draft costing `behind_ms` more than its length's time: a draft
    /// model's catch-up on the tokens it has not seen since it last drafted.
    fn choose_behind(&self, most: usize, class: usize, behind_ms: f64) -> usize {
        let most = most.min(self.spec.max_draft);
        if self.spec.fixed {
            return most;
        }
        let Some(plain) = self.step_cost(0) else {
            return 0;
        };
        if most > 0 && self.step_ms[1].is_none() {
            // Nothing is known of a draft's cost before one is timed: one draft, once.
            return 1;
        }
        let a = self.kept_share(class);
        let mut best = (0, 1.0 / plain);
        for d in 1..=most {
            let cost = self.step_cost(d).map_or(f64::INFINITY, |ms| ms + behind_ms);
            let rate = expected_tokens(a, d) / cost;
            if rate > best.1 {
                best = (d, rate);
            }
        }
        best.0
    }

    /// Draft up to `n` tokens to follow `history` (the prompt and every token so far, the last
    /// one not yet run through the model), as many as [`choose`](Self::choose) says.
    pub async fn draft(&mut self, history: &[u32], n: usize) -> Result<Draft> {
        let Some(state) = &self.model else {
            // What lookup has, then the length worth verifying of it.
            let most = n.min(self.spec.max_draft);
            let (k, mut tokens) = lookup_match(history, self.spec.ngram, most);
            self.class = k.saturating_sub(1);
            tokens.truncate(self.choose(tokens.len(), self.class));
            return Ok(Draft {
                tokens,
                ..Draft::default()
            });
        };
        // Tokens it would run to catch up, beyond the two of a step after a draft.
        let behind = history.len().saturating_sub(2 + state.cache.len());
        let n = self.choose_behind(n, 0, behind as f64 * self.catch_up_ms);
        self.caught_up = behind;
        // (A draft of none runs nothing.)
        let state = self.model.as_mut().expect("a draft model");
        state.draft(history, n).await
    }

    /// A draft model reads the prompt (the prefill's share of drafting); lookup has nothing to do.
    pub async fn prefill(&mut self, prompt: &[u32]) -> Result<()> {
        if let Some(state) = &mut self.model {
            let model = &state.engine.model;
            if state.cache.is_empty() && prompt.len() < model.config.seq_len {
                model
                    .forward(prompt, &mut state.cache, false)
                    .argmax()
                    .await?;
            }
        }
        Ok(())
    }

    /// Learn from a step: `accepted` of `drafted` kept, the step taking `ms` (drafting,
    /// verifying and choosing included), of which `catch_up_ms` a draft model's catch-up
    /// ([`Draft::catch_up_ms`]: learnt apart, a token caught up, and left out of the length's
    /// time).
    pub fn verified(&mut self, drafted: usize, accepted: usize, ms: f64, catch_up_ms: f64) {
        if drafted > 0 && self.caught_up > 0 && catch_up_ms > 0.0 {
            let per_token = catch_up_ms / self.caught_up as f64;
            self.catch_up_ms = if self.catch_up_ms > 0.0 {
                self.catch_up_ms + NEW_TIME * (per_token - self.catch_up_ms)
            } else {
                per_token
            };
        }
        let ms = ms - catch_up_ms;
        self.steps += 1;
        for count in self.kept.iter_mut().chain(&mut self.judged) {
            *count *= FORGET;
        }
        if drafted > 0 {
            self.kept[self.class] += accepted as f64;
            self.judged[self.class] += (accepted + usize::from(accepted < drafted)) as f64;
        }
        if let Some(slot) = self.step_ms.get_mut(drafted) {
            let average = match *slot {
                Some((old, at)) if self.steps - at <= STALE_STEPS => {
                    old + NEW_TIME * (ms.min(old * MOST_ABOVE) - old)
                }
                _ => ms,
            };
            *slot = Some((average, self.steps));
        }
    }
}

impl DraftState {
    /// Run the draft model over the history it has not seen, then `n` tokens ahead of it.
    async fn draft(&mut self, history: &[u32], n: usize) -> Result<Draft> {
        let model = &self.engine.model;
        let context = model.config.seq_len;
        let n = n.min(context.saturating_sub(history.len()));
        if n == 0 {
            return Ok(Draft::default());
        }
        // Its cache keeps what was verified; what the model went on to say is run now.
        let seen = self.cache.len().min(history.len() - 1);
        self.cache.truncate(seen);
        // Catching up, timed apart (read back, so that a GPU's work is in its time).
        let last = history.len().saturating_sub(2).max(seen);
        let mut catch_up_ms = 0.0;
        if last > seen {
            let start = web_time::Instant::now();
            model
                .forward(&history[seen..last], &mut self.cache, false)
                .argmax()
                .await?;
            catch_up_ms = ms_since(start);
        }
        let greedy = self.sampler.is_greedy();
        let mut tokens = Vec::with_capacity(n);
        let mut probs = Vec::new();
        let mut logits = model.forward(&history[last..], &mut self.cache, false);
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
            catch_up_ms,
        })
    }
}

/// Prompt-lookup drafting: find the latest earlier place where the last `k` tokens of `history`
/// appeared (`k` from `ngram` down to 1) and propose up to `n` of the tokens that followed it.
pub fn lookup(history: &[u32], ngram: usize, n: usize) -> Vec<u32> {
    lookup_match(history, ngram, n).1
}

/// [`lookup`], with the length `k` of the n-gram matched (0: none).
pub fn lookup_match(history: &[u32], ngram: usize, n: usize) -> (usize, Vec<u32>) {
    let len = history.len();
    for k in (1..=ngram.min(len.saturating_sub(1))).rev() {
        let tail = &history[len - k..];
        // Matches ending before the tail itself, latest first.
        for start in (0..len - k).rev() {
            if &history[start..start + k] == tail {
                let from = start + k;
                let to = (from + n).min(len);
                return (k, history[from..to].to_vec());
            }
        }
    }
    (0, Vec::new())
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

    fn drafter(max_draft: usize) -> Drafter {
        let mut spec = Speculation::lookup();
        spec.max_draft = max_draft;
        Drafter::new(spec, Sampling::default())
    }

    /// Steps verifying `d` drafts, `kept` of them kept, each taking `ms`.
    fn steps(drafter: &mut Drafter, n: usize, d: usize, kept: usize, ms: f64) {
        for _ in 0..n {
            drafter.verified(d, kept, ms, 0.0);
        }
    }

    #[test]
    fn a_draft_of_d_is_worth_the_kept_drafts_and_the_model_s_own_token() {
        assert_eq!(expected_tokens(0.0, 5), 1.0);
        assert_eq!(expected_tokens(1.0, 3), 4.0);
        assert!((expected_tokens(0.5, 2) - 1.75).abs() < 1e-12);
    }

    /// The first step is plain (timed); then one draft is tried (the prior), and the length
    /// follows the measured costs: where rows are nearly free, as long as allowed while most
    /// drafts are kept.
    #[test]
    fn cheap_rows_make_long_drafts() {
        let mut drafter = drafter(8);
        assert_eq!(drafter.choose(8, 0), 0);
        drafter.verified(0, 0, 10.0, 0.0);
        assert_eq!(drafter.choose(8, 0), 1);
        drafter.verified(1, 1, 10.2, 0.0);
        // 0.2 ms a row, most drafts kept: the longest.
        assert_eq!(drafter.choose(8, 0), 8);
        assert_eq!(drafter.choose(3, 0), 3);
        steps(&mut drafter, 4, 8, 8, 11.6);
        assert_eq!(drafter.choose(8, 0), 8);
        // Few kept (a fresh drafter): shorter drafts, still worth it at these costs; the lengths
        // not timed lie between those that were.
        let mut drafter = self::drafter(8);
        for (d, ms) in [(0, 10.0), (1, 10.2), (2, 10.4), (8, 11.6)] {
            drafter.verified(d, 0, ms, 0.0);
        }
        assert!((drafter.step_cost(5).unwrap() - 11.0).abs() < 1e-9);
        let d = drafter.choose(8, 0);
        assert!((1..8).contains(&d), "{d}");
    }

    /// Where each row costs most of a step (the page's), one draft while drafts are kept, none
    /// once they are not; after a while without drafting, one is tried again.
    #[test]
    fn costly_rows_make_one_draft_or_none() {
        let mut drafter = drafter(8);
        drafter.verified(0, 0, 10.0, 0.0);
        drafter.verified(1, 1, 14.0, 0.0);
        // A second row guessed at 4 ms more: tried while all are kept...
        assert_eq!(drafter.choose(8, 0), 2);
        drafter.verified(2, 2, 24.0, 0.0);
        // ...and dropped once timed at 10 ms more (2.4 steps for 3 tokens against 1.4 for 2).
        steps(&mut drafter, 5, 1, 1, 14.0);
        assert_eq!(drafter.choose(8, 0), 1);
        // Nothing kept: no drafts.
        steps(&mut drafter, 20, 1, 0, 14.0);
        assert_eq!(drafter.choose(8, 0), 0);
        let mut waited = 0;
        while drafter.choose(8, 0) == 0 {
            drafter.verified(0, 0, 10.0, 0.0);
            waited += 1;
            assert!(waited < 300, "never tries a draft again");
        }
        assert!(waited > 5, "tried again after {waited} steps");
    }

    /// A step far slower than its length's average moves the average by at most half of it, and
    /// a length's time is taken again once stale.
    #[test]
    fn one_slow_step_does_not_rule_a_length_out() {
        let mut drafter = drafter(4);
        drafter.verified(0, 0, 10.0, 0.0);
        drafter.verified(1, 1, 11.0, 0.0);
        drafter.verified(1, 1, 1000.0, 0.0);
        let cost = drafter.step_cost(1).unwrap();
        assert!((cost - 11.0 * (1.0 + NEW_TIME * (MOST_ABOVE - 1.0))).abs() < 1e-9);
        // After STALE_STEPS without a plain step, one is timed again.
        steps(&mut drafter, STALE_STEPS, 1, 1, 11.0);
        assert_eq!(drafter.step_cost(0), None);
        assert_eq!(drafter.choose(4, 0), 0);
    }

    /// `fixed` drafts as many as allowed, whatever the costs; lookup drafts what it finds.
    #[test]
    fn fixed_lengths_draft_the_most_allowed() {
        let mut spec = Speculation::lookup();
        spec.max_draft = 4;
        spec.fixed = true;
        let mut drafter = Drafter::new(spec, Sampling::default());
        assert_eq!(drafter.choose(8, 0), 4);
        steps(&mut drafter, 3, 4, 0, 100.0);
        assert_eq!(drafter.choose(2, 0), 2);
        let history = [1, 2, 3, 1, 2];
        let draft = futures_lite::future::block_on(drafter.draft(&history, 8)).unwrap();
        assert_eq!(draft.tokens, vec![3, 1, 2]);
    }

    /// A draft model's catch-up (the history it had not seen after steps without drafts) is
    /// learnt a token at a time and left out of the length's time; a draft that would first
    /// catch up on much history must be worth that too.
    #[test]
    fn a_catch_up_is_priced_apart_from_the_draft_length() {
        let mut drafter = drafter(8);
        drafter.verified(0, 0, 10.0, 0.0);
        drafter.caught_up = 30;
        drafter.verified(1, 1, 100.0, 90.0);
        assert_eq!(drafter.step_cost(1), Some(10.0));
        assert_eq!(drafter.catch_up_ms, 3.0);
        assert_eq!(drafter.choose_behind(8, 0, 0.0), 8);
        assert_eq!(drafter.choose_behind(8, 0, 30.0 * drafter.catch_up_ms), 0);
    }
}
