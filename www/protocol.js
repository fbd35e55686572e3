// @ts-check
// The page <-> worker protocol, defined once. Every request the page sends carries an `id` (a
// number unique within one page), and every reply to it names that id, so that several requests
// can be in flight and a late reply (a stop that reaches a run after it ended, the events of a run
// the page has moved on from) is never taken for another's. Figures are never computed on the
// page: reports come from the engine's meter, and so do the run defaults and the word rule.

/**
 * Where a file comes from: a URL (downloaded and cached) or a File the visitor picked.
 * @typedef {{ url: string, bytes?: number, sha256?: string, host?: string } | { file: File } | { parts: { url: string, bytes: number, sha256: string }[], bytes: number, sha256?: string }} Source  a file a site's catalog names comes in parts, or from another host, with its sha-256
 */

/**
 * What to load: a model (and its tokenizer and Hugging Face config.json where it needs them) on a
 * backend, in a quantization.
 * @typedef {object} LoadSpec
 * @property {string} name
 * @property {Source} model
 * @property {Source | null} [tokenizer]
 * @property {Source | null} [config]
 * @property {string} backend  `auto`, `wgpu` or `cpu`
 * @property {string} quant  `stored` (each tensor as the file stores it), `f32`, `q8` or `q4`
 * @property {number} [threads]  the CPU kernels' threads (the threaded build only; default 1)
 * @property {boolean} [check_gpu]  on the GPU, check its logits against the CPU's at load (crate/api/auto.rs)
 */

/**
 * The engine's defaults for a run and for a concurrency lab (served by `defaults()` in
 * crate/api/web/options.rs; the page's form takes its initial values from here).
 * @typedef {object} Defaults
 * @property {{ max_tokens: number, temperature: number, top_p: number, seed: number, reading_wpm: number, chat: boolean }} run
 * @property {{ users: number, arrival: string, max_batch: number | null, max_tokens: number, reading_wpm: number }} lab
 * @property {{ threads: boolean, gpu: boolean }} build  what the worker's build of the engine can do
 * @property {[number, string][]} feel  the speed buttons' rates, each with how it compares with a reader (meter::pace)
 * @property {string} architectures  the GGUF architectures the engine runs, with their models
 */

/**
 * Requests, page to worker.
 * @typedef {{ type: 'load', id: number } & LoadSpec} LoadRequest
 * @typedef {{ type: 'run', id: number, prompt: string, options: object, pump_ms?: number }} RunRequest  options: crate/api/web/options.rs `RunOptions`; `pump_ms`: how long the engine runs between its messages (16, about a frame, unless given)
 * @typedef {{ type: 'lab', id: number, options: object }} LabRequest  options: crate/api/web/options.rs `LabOptions`, and `slo_ttft_ms`, `slo_tpot_ms` (objectives in ms, or null)
 * @typedef {{ type: 'spread', id: number, values: number[] }} SpreadRequest  the meter's median/min/max of repeated figures
 * @typedef {{ type: 'versus', id: number, pairs: number[] }} VersusRequest  the meter's ratio of each pair of figures (NaN: undefined)
 * @typedef {{ type: 'chat', id: number, request: object }} ChatRequest  OpenAI's chat completion request (crate/api/openai.rs)
 * @typedef {{ type: 'draft', id: number }} DraftRequest  load the draft model (the loaded model at q4) for `speculate: 'draft'`
 * @typedef {{ type: 'cancel', id: number }} CancelRequest  `id`: the run or lab to stop
 * @typedef {{ type: 'probe', id: number, threads: number }} ProbeRequest  this device's memory read bandwidth at `threads` threads (answered `probed`, `read_gb_per_s`)
 * @typedef {{ type: 'race-decode', id: number }} RaceDecodeRequest  auto's timed decode on the loaded model (answered `raced`)
 * @typedef {{ type: 'race-verdict', id: number, cpu: object, gpu: object, check: object | null }} RaceVerdictRequest  auto's verdict from both figures (answered `verdict`)
 * @typedef {{ type: 'note', id: number, note: string }} NoteRequest  put how the backend was chosen in the loaded model's conditions (answered `noted`, with its info)
 * @typedef {{ url: string, model?: string, key?: string, stall_s?: number, request_s?: number }} EndpointChoice  an OpenAI-compatible server as the visitor named it (`key`: in memory only; `stall_s`, `request_s`: the client's limits, from the URL's `endpoint_timeout` and `request_timeout`)
 * @typedef {{ base: string, model: string, server: string | null, protocol: string | null, key?: string, stall_s?: number, request_s?: number }} Endpoint  the same, reached: the API's base, the model asked for, the server's software, the HTTP version the browser reached it by (`http/1.1`, `h2`, `h3`; null where the browser does not say), and the limits the worker keeps
 * @typedef {{ type: 'connect', id: number } & EndpointChoice} ConnectRequest  reach an endpoint (GET /models)
 * @typedef {{ type: 'endpoint-run', id: number, endpoint: Endpoint, prompt: string, options: object }} EndpointRunRequest  stream one request from it, metered
 * @typedef {{ type: 'endpoint-lab', id: number, endpoint: Endpoint, options: object }} EndpointLabRequest  a concurrency lab of real streams from it, metered (answered as a lab is)
 * @typedef {LoadRequest | RunRequest | LabRequest | ChatRequest | SpreadRequest | VersusRequest | DraftRequest | CancelRequest | ConnectRequest | EndpointRunRequest | EndpointLabRequest | RaceDecodeRequest | RaceVerdictRequest | NoteRequest | ProbeRequest} Request
 */

/**
 * Replies, worker to page. Those without an `id` concern the worker itself.
 * @typedef {{ type: 'ready', webgpu: boolean }} Ready  the worker takes requests (the engine may still be compiling)
 * @typedef {{ type: 'defaults', defaults: Defaults }} DefaultsReply  the engine compiled; its defaults
 * @typedef {{ type: 'progress', id: number, label: string, loaded: number, total: number, cached?: boolean, uncached?: string }} Progress  `uncached`: why the browser would not keep a copy
 * @typedef {{ type: 'status', id: number, status: string }} Status
 * @typedef {{ type: 'loaded', id: number, info: any, wasmMemoryBytes: number, fileHeldBytes: number }} Loaded
 * @typedef {{ type: 'warmed', id: number, ms: number }} Warmed  the load request is done
 * @typedef {{ type: 'events', id: number, events: any[], points: { token: number, rate: number | null }[], report: any, word_ends: number[] }} Events  a run's events, in order (an endpoint's: `chunk` events, each with its tokens), and the rate chart's points they add (the meter's)
 * @typedef {{ type: 'finished', id: number, report: any }} Finished  the run is over (ended, or stopped): its final report
 * @typedef {{ type: 'lab-events', id: number, events: any[], users: any[] | null, report: any }} LabEvents
 * @typedef {{ type: 'lab-finished', id: number, report: any }} LabFinished
 * @typedef {{ type: 'spread', id: number, spread: { n: number, median: number, min: number, max: number } | null }} SpreadReply
 * @typedef {{ type: 'versus', id: number, ratios: (number | null)[] }} VersusReply
 * @typedef {{ type: 'chat-chunks', id: number, chunks: any[], done: boolean }} ChatChunks  a pump's chunks of a chat completion (the whole completion at the end when it does not stream)
 * @typedef {{ type: 'draft-loaded', id: number }} DraftLoaded  the draft model is loaded and warmed up
 * @typedef {{ type: 'connected', id: number, endpoint: Endpoint }} Connected  the endpoint answered /models
 * @typedef {{ type: 'raced', id: number, decode_tps: number }} Raced  auto's timed decode: the meter's decode tok/s
 * @typedef {{ type: 'probed', id: number, read_gb_per_s: number }} Probed  the memory's read bandwidth, GB/s
 * @typedef {{ type: 'verdict', id: number, verdict: any }} VerdictReply  auto's verdict (crate/api/auto.rs `Verdict`)
 * @typedef {{ type: 'noted', id: number, info: any }} Noted  the note is in the conditions
 * @typedef {{ type: 'error', id?: number, message: string }} ErrorReply  the request failed; the worker is fine
 * @typedef {{ type: 'fatal', message: string }} Fatal  the engine trapped or lost its GPU: the worker must be replaced
 * @typedef {Ready | DefaultsReply | Progress | Status | Loaded | Warmed | Events | Finished | LabEvents | LabFinished | SpreadReply | VersusReply | ChatChunks | DraftLoaded | Connected | Raced | Probed | VerdictReply | Noted | ErrorReply | Fatal} Reply
 */

/**
 * The choices a run's configuration takes, each `[value, label]`: defined here once, and every
 * select that offers them (the form's, each lane's) is filled from these lists.
 * @type {[string, string][]}
 */
export const BACKEND_CHOICES = [
  ['auto', 'auto (the faster, raced)'],
  ['wgpu', 'WebGPU'],
  ['cpu', 'CPU (wasm)'],
];
/**
 * Speculative decoding's choices (crate/decode/speculate.rs): off, prompt lookup, or the loaded
 * model at q4 drafting for itself.
 * @type {[string, string][]}
 */
export const SPECULATE_CHOICES = [
  ['off', 'off'],
  ['lookup', 'prompt lookup'],
  ['draft', 'this model at q4 as draft'],
];
export const SPECULATES = SPECULATE_CHOICES.map(([value]) => value);
/** The longest draft: lookup drafts up to this many tokens a step, as measured costs favour. */
export const MAX_DRAFTS = 8;
/**
 * Tokens the draft model drafts a step in the page, every step: it is there to show the
 * mechanism, and a draft model of the model's own size costs nearly a pass a drafted token, so the
 * lengths measured costs favour (lookup's) would seldom draft at all (docs/page.md).
 */
export const DRAFT_MODEL_LENGTH = 3;
/**
 * A run's speculation options for a choice of SPECULATE_CHOICES: `drafts` (the URL's `drafts=N`)
 * drafts N tokens every step, fixed; without it lookup drafts as measured costs favour and the
 * draft model DRAFT_MODEL_LENGTH every step.
 * @param {string} choice
 * @param {number | null} [drafts]
 */
export function speculateOptions(choice, drafts = null) {
  if (drafts) return { speculate: choice, draft_max: drafts, draft_fixed: true };
  if (choice === 'draft')
    return { speculate: choice, draft_max: DRAFT_MODEL_LENGTH, draft_fixed: true };
  return { speculate: choice, draft_max: MAX_DRAFTS, draft_fixed: false };
}

/**
 * The URL's `drafts=N`: a fixed draft length, 1 to MAX_DRAFTS.
 * @param {string} raw
 * @returns {number}
 */
export function parseDrafts(raw) {
  const n = Number(raw);
  if (raw.trim() === '' || !Number.isInteger(n) || n < 1 || n > MAX_DRAFTS) {
    throw new Error(
      `drafts=${raw} is not a number of drafts from 1 to ${MAX_DRAFTS} (each step drafts that many; leave it out for the lengths measured costs favour)`,
    );
  }
  return n;
}
/** @type {[string, string][]} */
export const QUANT_CHOICES = [
  ['stored', 'as stored'],
  ['f32', 'f32'],
  ['q8', 'q8 (Q8_0)'],
  ['q4', 'q4 (Q4_0)'],
];
export const BACKENDS = BACKEND_CHOICES.map(([value]) => value);
export const QUANTS = QUANT_CHOICES.map(([value]) => value);
/** Other names people use for a backend. */
export const BACKEND_ALIASES = { webgpu: 'wgpu', gpu: 'wgpu', wasm: 'cpu' };

let lastId = 0;
/** A request id unique within this page (every worker's requests share the count). */
export function nextId() {
  lastId += 1;
  return lastId;
}

/**
 * The endpoint client's limits from the page's URL, in seconds: `endpoint_timeout` (nothing but
 * keep-alive comments for that long is a stall; default 60) and `request_timeout` (a whole
 * request; default 600), as the command line's `--endpoint-timeout` and `--request-timeout`.
 * @returns {{ stall_s?: number, request_s?: number }}
 */
export function endpointLimits(/** @type {string} */ search) {
  const params = new URLSearchParams(search);
  /** @type {{ stall_s?: number, request_s?: number }} */
  const limits = {};
  for (const [param, field] of /** @type {const} */ ([
    ['endpoint_timeout', 'stall_s'],
    ['request_timeout', 'request_s'],
  ])) {
    if (!params.has(param)) continue;
    const seconds = Number(params.get(param));
    if (!(seconds > 0 && seconds <= 86_400))
      throw new Error(
        `${param}=${params.get(param)} is not a number of seconds from above 0 to 86400`,
      );
    limits[field] = seconds;
  }
  return limits;
}
