// The page: renders what the worker reports. It never computes a figure itself; the meter's report
// (computed in Rust, in the worker) arrives with every event.
import { ConcurrencyLab } from './lab.js';

const LLAMA2_TOKENIZER = 'https://raw.githubusercontent.com/karpathy/llama2.c/master/tokenizer.bin';
const TINYLLAMAS = 'https://huggingface.co/karpathy/tinyllamas/resolve/main';
const MODELS = [
  { id: 'stories260K', label: 'stories260K (local, 1 MB)', model: 'models/stories260K/stories260K.bin', tokenizer: 'models/stories260K/tok512.bin' },
  { id: 'stories260K-gguf', label: 'stories260K GGUF Q8_0 (local, tokenizer inside)', model: 'models/stories260K/stories260K-q8_0.gguf' },
  { id: 'stories15M', label: 'stories15M (Hugging Face, 61 MB)', model: `${TINYLLAMAS}/stories15M.bin`, tokenizer: LLAMA2_TOKENIZER },
  { id: 'stories42M', label: 'stories42M (Hugging Face, 167 MB)', model: `${TINYLLAMAS}/stories42M.bin`, tokenizer: LLAMA2_TOKENIZER },
  { id: 'stories110M', label: 'stories110M (Hugging Face, 438 MB)', model: `${TINYLLAMAS}/stories110M.bin`, tokenizer: LLAMA2_TOKENIZER },
  { id: 'url', label: 'From a URL…' },
  { id: 'file', label: 'Local files…' },
];

const $ = (id) => document.getElementById(id);
const el = {
  model: $('model'), backend: $('backend'), quant: $('quant'), prompt: $('prompt'), max: $('max'),
  temperature: $('temperature'), wpm: $('wpm'), run: $('run'), stop: $('stop'), status: $('status'),
  error: $('error'), conditions: $('conditions'), live: $('live'), chart: $('chart'),
  read: $('read'), ahead: $('ahead'), promptEcho: $('prompt-echo'), stopReason: $('stop-reason'),
  modelUrl: $('model-url'), tokenizerUrl: $('tokenizer-url'), modelFile: $('model-file'),
  tokenizerFile: $('tokenizer-file'), configFile: $('config-file'), urlFields: $('url-fields'),
  fileFields: $('file-fields'), download: $('download'), downloadBar: $('download-bar'),
  downloadText: $('download-text'), warmup: $('warmup'), warmupText: $('warmup-text'),
  openToFirst: $('m-open-to-first'),
};
const figures = {
  ttft: [$('m-ttft'), (r) => r.ttft_ms, 1], prefillMs: [$('m-prefill-ms'), (r) => r.prefill_ms, 1],
  prefillTps: [$('m-prefill-tps'), (r) => r.prefill_tps, 1], decodeTps: [$('m-decode-tps'), (r) => r.decode_tps, 1],
  p50: [$('m-itl-p50'), (r) => r.inter_token_ms?.p50, 2], p99: [$('m-itl-p99'), (r) => r.inter_token_ms?.p99, 2],
  wps: [$('m-wps'), (r) => r.words_per_s, 1], readingX: [$('m-reading-x'), (r) => r.reading_speed_x, 1],
  gbps: [$('m-gbps'), (r) => r.effective_gb_per_s, 3], total: [$('m-total'), (r) => r.total_ms, 0],
  predicted: [$('m-predicted'), (r) => r.predicted_total_ms, 0],
};

const state = {
  worker: null, loadedKey: null, loading: null, running: false, labBusy: false, runId: null,
  text: '', report: null, points: [], readerStart: null, warmUpMs: null, openToFirstTokenMs: null,
};

// ---- the worker ---------------------------------------------------------------------------

function startWorker() {
  state.worker?.terminate();
  state.loadedKey = null;
  state.worker = new Worker(new URL('./worker.js', import.meta.url), { type: 'module' });
  state.worker.onmessage = ({ data }) => handlers[data.type]?.(data);
  state.worker.onerror = (e) => fail(`the worker failed: ${e.message}`);
  return new Promise((resolve) => { state.workerReady = resolve; });
}

const handlers = {
  ready: () => state.workerReady(),
  progress: ({ label, loaded, total, cached }) => {
    el.download.hidden = false;
    el.downloadBar.max = total || 1;
    el.downloadBar.value = total ? loaded : 0;
    const pct = total ? ` (${((100 * loaded) / total).toFixed(0)}%)` : '';
    el.downloadText.textContent = `${label}: ${formatBytes(loaded)}${total ? ` of ${formatBytes(total)}` : ''}${pct}${cached ? ', from cache' : ''}`;
  },
  status: ({ status }) => setStatus(status),
  loaded: ({ info }) => {
    el.conditions.textContent = `${info.model} · ${formatCount(info.parameters)} params · ${info.quant} · ${formatBytes(info.weight_bytes)} · ${info.backend} (${info.adapter})${info.backend_note ? ` · ${info.backend_note}` : ''}`;
    el.warmup.hidden = false;
    state.warmStart = performance.now();
    tickWarmup();
  },
  warmed: ({ ms }) => {
    state.warmUpMs = ms;
    el.warmup.hidden = true;
    el.conditions.textContent += ` · warm-up ${ms.toFixed(0)} ms (apart)`;
    setStatus('idle');
    state.loading?.resolve();
  },
  events: ({ id, events, report }) => {
    if (id !== state.runId) return;
    if (report) state.report = report;
    for (const [i, event] of events.entries()) {
      if (event.event === 'token') {
        // The page's first token: from opening the page (navigation start) to the token on hand
        // here, with the engine's compile, the download, the load, the warm-up and the prefill.
        if (state.openToFirstTokenMs === null) {
          state.openToFirstTokenMs = performance.now();
          el.openToFirst.textContent = (state.openToFirstTokenMs / 1000).toFixed(2);
        }
        state.text += event.text;
        if (state.readerStart === null) state.readerStart = performance.now();
        const points = state.points;
        const gap = points.length ? event.t_ms - points[points.length - 1].t : null;
        // The live figure comes with the batch's report, so it belongs to the batch's last token.
        const live = report && i === events.length - 1 ? report.live_decode_tps : null;
        points.push({ t: event.t_ms, pos: event.pos, rate: gap > 0 ? 1000 / gap : null, live });
      } else if (event.event === 'done') {
        state.text += event.trailing_text;
        el.stopReason.textContent = event.reason.replace('_', ' ');
      }
    }
    scheduleRender();
  },
  finished: ({ id, report }) => {
    if (id !== state.runId) return;
    state.report = report;
    finishRun();
  },
  'lab-events': (message) => labListeners.get(message.id)?.(message),
  'lab-finished': (message) => {
    labListeners.get(message.id)?.(message);
    labListeners.delete(message.id);
  },
  error: ({ message, id }) => {
    const lab = labListeners.get(id);
    if (lab) {
      labListeners.delete(id);
      return lab({ type: 'error', message });
    }
    fail(message);
  },
  fatal: ({ message }) => {
    // The wasm instance trapped or lost its GPU device; a fresh worker is the only safe state.
    for (const lab of labListeners.values()) lab({ type: 'error', message: `${message}; the engine was restarted` });
    labListeners.clear();
    if (state.running || !state.labBusy) fail(`${message}; the engine was restarted, Run loads the model again`);
    startWorker();
  },
};

// ---- the concurrency lab's access to the worker --------------------------------------------

// Request ids of labs in the worker, and who hears their replies.
const labListeners = new Map();
let nextRequestId = 1;

/** @type {import('./lab.js').LabClient} */
const labClient = {
  ensureLoaded,
  runLab(options, onMessage) {
    const id = nextRequestId++;
    labListeners.set(id, onMessage);
    state.worker.postMessage({ type: 'lab', id, options });
    return id;
  },
  cancelLab: (id) => state.worker.postMessage({ type: 'cancel', id }),
  // One thing runs in the worker at a time, so that neither measurement slows the other.
  claim(busy) {
    if (busy && state.running) return false;
    state.labBusy = busy;
    el.run.disabled = busy;
    return true;
  },
  readingWpm: () => Number(el.wpm.value) || 238,
};

// ---- loading and running ------------------------------------------------------------------

// A GGUF file carries its tokenizer.
const isGguf = (name) => /\.gguf($|[?#])/i.test(name);

function selection() {
  const choice = MODELS.find((m) => m.id === el.model.value);
  let source;
  if (choice.id === 'url') {
    if (!el.modelUrl.value) throw new Error('enter a model URL');
    if (!el.tokenizerUrl.value && !isGguf(el.modelUrl.value)) throw new Error('enter a tokenizer URL (only a .gguf model carries its own)');
    source = { name: nameOf(el.modelUrl.value), model: { url: el.modelUrl.value }, tokenizer: el.tokenizerUrl.value ? { url: el.tokenizerUrl.value } : null };
  } else if (choice.id === 'file') {
    const [model, tokenizer, config] = [el.modelFile.files[0], el.tokenizerFile.files[0], el.configFile.files[0]];
    if (!model) throw new Error('pick a model file');
    if (!tokenizer && !isGguf(model.name)) throw new Error('pick a tokenizer file (only a .gguf model carries its own)');
    source = { name: nameOf(model.name), model: { file: model }, tokenizer: tokenizer ? { file: tokenizer } : null, config: config && { file: config } };
  } else {
    source = { name: choice.id, model: { url: choice.model }, tokenizer: choice.tokenizer ? { url: choice.tokenizer } : null };
  }
  const files = [source.model, source.tokenizer, source.config].map((s) => s && (s.url || `${s.file.name}:${s.file.size}:${s.file.lastModified}`));
  return { ...source, backend: el.backend.value, quant: el.quant.value, key: [...files, el.backend.value, el.quant.value].join('|') };
}

async function ensureLoaded() {
  const want = selection();
  if (state.loadedKey === want.key) return;
  setStatus('downloading');
  await new Promise((resolve, reject) => {
    state.loading = { resolve, reject };
    const { key, ...request } = want;
    state.worker.postMessage({ type: 'load', ...request });
  });
  state.loadedKey = want.key;
}

async function run() {
  if (state.running || state.labBusy) return;
  clearError();
  try {
    await ensureLoaded();
  } catch (e) {
    return fail(e.message);
  }
  // The queue starts once the model is ready: loading and warm-up are reported on their own.
  const requestedAt = performance.timeOrigin + performance.now();
  resetOutput();
  state.running = true;
  el.run.disabled = true;
  el.stop.disabled = false;
  setStatus('running');
  state.runId = nextRequestId++;
  state.worker.postMessage({
    type: 'run',
    id: state.runId,
    prompt: el.prompt.value,
    options: {
      max_tokens: Number(el.max.value), temperature: Number(el.temperature.value), top_p: 0.9, seed: 42,
      requested_at: requestedAt, reading_wpm: Number(el.wpm.value),
    },
  });
}

function stop() {
  if (!state.running) return;
  state.worker.postMessage({ type: 'cancel', id: state.runId });
  // The worker hears a stop between pumps (about a frame apart). Should a step hang (a GPU that
  // stopped answering), restart the worker after a moment; the model then loads again on the next
  // run.
  setTimeout(() => {
    if (!state.running) return;
    el.stopReason.textContent = 'cancelled';
    finishRun();
    startWorker();
  }, 1500);
}

function finishRun() {
  state.running = false;
  el.run.disabled = false;
  el.stop.disabled = true;
  setStatus('done');
  scheduleRender();
}

function fail(message) {
  state.loading?.reject(new Error(message));
  state.loading = null;
  state.running = false;
  el.run.disabled = false;
  el.stop.disabled = true;
  el.warmup.hidden = true;
  el.error.textContent = message;
  el.error.hidden = false;
  setStatus('error');
}

// ---- rendering ----------------------------------------------------------------------------

function setStatus(status) {
  el.status.textContent = status;
}

function clearError() {
  el.error.hidden = true;
  el.error.textContent = '';
}

function resetOutput() {
  state.text = '';
  state.points = [];
  state.report = null;
  state.readerStart = null;
  el.stopReason.textContent = '–';
  el.promptEcho.textContent = el.prompt.value;
  for (const [node] of Object.values(figures)) node.textContent = '–';
  el.live.textContent = '–';
  scheduleRender();
}

let frame = 0;
function scheduleRender() {
  if (!frame) frame = requestAnimationFrame(render);
}

function render() {
  frame = 0;
  const report = state.report;
  if (report) {
    for (const [node, pick, digits] of Object.values(figures)) node.textContent = formatNumber(pick(report), digits);
    el.live.textContent = formatNumber(state.running ? report.live_decode_tps : report.decode_tps, 0);
    el.conditions.textContent = `${report.summary}${state.warmUpMs !== null ? ` · warm-up ${state.warmUpMs.toFixed(0)} ms (apart)` : ''}`;
  }
  renderText();
  drawChart();
  // Keep the reading cursor moving until the reader has caught up.
  if (state.running || readerWords() < wordEnds(state.text).length) scheduleRender();
}

function readerWords() {
  if (state.readerStart === null) return 0;
  return ((performance.now() - state.readerStart) / 60000) * Number(el.wpm.value || 238);
}

// Where each word ends; a word is a run of non-spaces with a letter or digit, as the meter counts.
function wordEnds(text) {
  const ends = [];
  for (const match of text.matchAll(/\S+/gu)) {
    if (/[\p{L}\p{N}]/u.test(match[0])) ends.push(match.index + match[0].length);
  }
  return ends;
}

function renderText() {
  const ends = wordEnds(state.text);
  const words = Math.floor(readerWords());
  const at = words === 0 ? 0 : words >= ends.length ? state.text.length : ends[words - 1];
  // Text nodes only: the model's output is never parsed as HTML.
  el.read.textContent = state.text.slice(0, at);
  el.ahead.textContent = state.text.slice(at);
}

function drawChart() {
  const canvas = el.chart;
  const ctx = canvas.getContext('2d');
  const { width, height } = canvas;
  const pad = { left: 64, right: 12, top: 12, bottom: 34 };
  ctx.clearRect(0, 0, width, height);
  const points = state.points.filter((p) => p.rate !== null);
  const style = getComputedStyle(document.body);
  ctx.fillStyle = style.color;
  ctx.font = '16px system-ui, sans-serif';
  if (!points.length) {
    ctx.fillText('tok/s by position appears here as tokens arrive', pad.left, height / 2);
    return;
  }
  const rates = points.map((p) => p.rate).sort((a, b) => a - b);
  const yMax = Math.max(1, rates[Math.floor(rates.length * 0.98)] * 1.2);
  const minPos = state.points[0].pos;
  const maxPos = Math.max(minPos + 1, state.points[state.points.length - 1].pos);
  const x = (pos) => pad.left + ((pos - minPos) / (maxPos - minPos)) * (width - pad.left - pad.right);
  const y = (rate) => height - pad.bottom - (Math.min(rate, yMax) / yMax) * (height - pad.top - pad.bottom);
  ctx.strokeStyle = style.color;
  ctx.beginPath();
  ctx.moveTo(pad.left, pad.top);
  ctx.lineTo(pad.left, height - pad.bottom);
  ctx.lineTo(width - pad.right, height - pad.bottom);
  ctx.stroke();
  ctx.fillText(`${yMax.toFixed(0)} tok/s`, 2, pad.top + 12);
  ctx.fillText('0', pad.left - 16, height - pad.bottom);
  ctx.fillText(`position ${minPos}`, pad.left, height - 10);
  ctx.fillText(`${maxPos}`, width - pad.right - 40, height - 10);
  ctx.fillStyle = '#4e9af1';
  for (const p of points) ctx.fillRect(x(p.pos) - 1.5, y(p.rate) - 1.5, 3, 3);
  ctx.strokeStyle = '#f5a524';
  ctx.lineWidth = 3;
  ctx.beginPath();
  let started = false;
  for (const p of state.points) {
    if (p.live === null || p.live === undefined) continue;
    if (started) ctx.lineTo(x(p.pos), y(p.live));
    else ctx.moveTo(x(p.pos), y(p.live));
    started = true;
  }
  ctx.stroke();
  ctx.lineWidth = 1;
}

function tickWarmup() {
  if (el.warmup.hidden) return;
  el.warmupText.textContent = `warming up (compiling shaders): ${((performance.now() - state.warmStart) / 1000).toFixed(1)} s`;
  setTimeout(tickWarmup, 100);
}

function formatNumber(value, digits) {
  return value === null || value === undefined || !Number.isFinite(value) ? '–' : value.toFixed(digits);
}

function formatBytes(bytes) {
  if (bytes >= 1e9) return `${(bytes / 1e9).toFixed(2)} GB`;
  if (bytes >= 1e6) return `${(bytes / 1e6).toFixed(1)} MB`;
  if (bytes >= 1e3) return `${(bytes / 1e3).toFixed(1)} kB`;
  return `${bytes} B`;
}

function formatCount(n) {
  if (n >= 1e6) return `${(n / 1e6).toFixed(1)}M`;
  if (n >= 1e3) return `${(n / 1e3).toFixed(0)}K`;
  return String(n);
}

function nameOf(path) {
  return path.split(/[\\/]/).pop().replace(/\.(bin|safetensors|gguf)$/, '') || 'model';
}

// ---- start-up: presets from the URL -------------------------------------------------------

// Other names people use for a choice in a preset URL.
const ALIASES = { backend: { webgpu: 'wgpu', gpu: 'wgpu', wasm: 'cpu' } };

// Apply `?model=..&prompt=..&max=..&backend=..&quant=..&temperature=..&wpm=..&autorun=1`. A value
// that is not one of the choices is named in an error (and nothing runs), never silently blank.
function applyPresets() {
  const params = new URLSearchParams(location.search);
  const model = params.get('model');
  if (model && MODELS.some((m) => m.id === model)) el.model.value = model;
  else if (model) {
    el.model.value = 'url';
    el.modelUrl.value = model;
    el.tokenizerUrl.value = params.get('tokenizer') || '';
  }
  const problems = [];
  for (const [param, input] of [['backend', el.backend], ['quant', el.quant]]) {
    if (!params.has(param)) continue;
    const raw = params.get(param);
    const value = ALIASES[param]?.[raw.toLowerCase()] ?? raw.toLowerCase();
    const choices = [...input.options].map((o) => o.value);
    if (choices.includes(value)) input.value = value;
    else problems.push(`${param}=${raw} is not a choice (${choices.join(', ')}${param === 'backend' ? '; webgpu means wgpu' : ''})`);
  }
  for (const [param, input] of [['max', el.max], ['temperature', el.temperature], ['wpm', el.wpm]]) {
    if (!params.has(param)) continue;
    const raw = params.get(param);
    const number = Number(raw);
    const min = Number(input.min || 0);
    if (raw.trim() !== '' && Number.isFinite(number) && number >= min) input.value = raw;
    else problems.push(`${param}=${raw} is not a number of at least ${min}`);
  }
  if (params.has('prompt')) el.prompt.value = params.get('prompt');
  showSourceFields();
  if (problems.length) {
    fail(`this page's URL has presets it cannot use: ${problems.join('; ')}`);
    return false;
  }
  return params.get('autorun') === '1';
}

function showSourceFields() {
  el.urlFields.hidden = el.model.value !== 'url';
  el.fileFields.hidden = el.model.value !== 'file';
}

for (const m of MODELS) el.model.add(new Option(m.label, m.id));
el.model.addEventListener('change', showSourceFields);
el.run.addEventListener('click', run);
el.stop.addEventListener('click', stop);
el.prompt.addEventListener('keydown', (e) => {
  if (e.key === 'Enter' && (e.ctrlKey || e.metaKey)) run();
});

new ConcurrencyLab(document.getElementById('lab'), labClient);

const autorun = applyPresets();
startWorker().then(() => {
  setStatus('idle');
  if (autorun) run();
});
