// Decode speed of tokenometer's page worker and of llama.cpp compiled to wasm (wllama), in the same
// tab, one engine at a time, runs interleaved (A B A B) so that both see the same machine.
// Both count decode tok/s the same way, from the times tokens reach this page: tokens after the
// first over the time from the first to the last. tokenometer's own meter is reported beside it.
// Query: ?runs=5&max=128&prompt=...&configs=f32:model-f32.gguf,q8:model-q8_0.gguf&tokenizer=1&threads=1,2
// (tokenizer=0: tokenometer's model file carries its own; threads: each engine at each count, all
// interleaved; more than one runs our threaded build and wllama's multi-thread one, both as the page
// would, in this cross-origin isolated page). Both get the prompt as it is (no chat
// template: wllama's completion does not apply one).
import { Wllama } from '/wllama/index.js';

const params = new URLSearchParams(location.search);
const runs = Number(params.get('runs') || 5);
const maxTokens = Number(params.get('max') || 128);
const prompt = params.get('prompt') || 'Once upon a time';
const ownTokenizer = params.get('tokenizer') !== '0';
const threadCounts = (params.get('threads') || '1').split(',').map(Number);
// Our engine once per speculation choice (off, lookup, draft), interleaved; wllama=0 leaves wllama out.
// Each may name its longest draft, lookup/4 (as measured costs favour), or a fixed length, lookup/1!.
const speculates = (params.get('speculate') || 'off').split(',');
const withWllama = params.get('wllama') !== '0';
const chat = params.get('chat') === '1';
const configs = (params.get('configs') || 'f32:model-f32.gguf,q8:model-q8_0.gguf')
  .split(',')
  .map((c) => {
    const [quant, gguf] = c.split(':');
    return { quant, gguf };
  });
const logEl = document.getElementById('log');
const log = (line) => {
  logEl.textContent += line + '\n';
  console.log(line);
};

/** tok/s after the first token over the span from the first to the last, from arrival times (ms). */
function decodeTps(times) {
  if (times.length < 2) return null;
  return (times.length - 1) / ((times[times.length - 1] - times[0]) / 1000);
}

function once(worker, wanted) {
  return new Promise((resolve, reject) => {
    const listener = ({ data }) => {
      if (data.type === 'error' || data.type === 'fatal') {
        worker.removeEventListener('message', listener);
        reject(new Error(data.message));
      } else if (data.type === wanted) {
        worker.removeEventListener('message', listener);
        resolve(data);
      }
    };
    worker.addEventListener('message', listener);
  });
}

async function tokenometer(quant, threads, choice = 'off') {
  const [speculate, draftMax] = choice.split('/');
  const worker = new Worker(`/worker.js?build=${threads > 1 ? 'threads' : 'relaxed'}`, {
    type: 'module',
  });
  await once(worker, 'ready');
  worker.postMessage({
    type: 'load',
    name: 'model',
    model: { url: '/files/model.bin' },
    tokenizer: ownTokenizer ? { url: '/files/tokenizer.bin' } : null,
    backend: 'cpu',
    quant,
    threads,
  });
  const loaded = await once(worker, 'loaded');
  await once(worker, 'warmed');
  if (loaded.info.build_note) throw new Error(loaded.info.build_note);
  if (speculate === 'draft') {
    worker.postMessage({ type: 'draft' });
    await once(worker, 'draft-loaded');
  }
  return {
    name: `tokenometer ${quant} ${threads}t${speculate !== 'off' ? ` ${choice}` : ''}`,
    adapter: loaded.info.adapter,
    memory: `wasm memory after load ${(loaded.wasmMemoryBytes / 1e6).toFixed(1)} MB`,
    async run() {
      const times = [];
      // Tokens reach the page in batches about once a frame, so their arrival times would be
      // off by up to a frame; each event carries the time the engine had it on the host.
      const listener = ({ data }) => {
        if (data.type !== 'events') return;
        for (const e of data.events) if (e.event === 'token') times.push(e.t_ms);
      };
      worker.addEventListener('message', listener);
      worker.postMessage({
        type: 'run',
        prompt,
        options: {
          max_tokens: maxTokens,
          temperature: 0,
          chat,
          speculate,
          ...(draftMax
            ? { draft_max: parseInt(draftMax, 10), draft_fixed: draftMax.endsWith('!') }
            : {}),
        },
      });
      const { report } = await once(worker, 'finished');
      worker.removeEventListener('message', listener);
      return {
        tokens: times.length,
        decode_tps: decodeTps(times),
        own_tps: report.decode_tps,
        ttft_ms: report.ttft_ms,
        prefill_tps: report.prefill_tps ?? null,
        acceptance: report.speculation?.acceptance_rate ?? null,
      };
    },
    close() {
      worker.terminate();
    },
  };
}

async function wllama(quant, gguf, threads) {
  const engine = new Wllama({ default: '/wllama/wasm/wllama.wasm' }, { suppressNativeLog: true });
  // Room for a long prompt (PROMPT of ~500 tokens for prefill) and its output.
  // From a Blob this page fetched: `loadModelFromUrl` writes every download into the origin's
  // storage (OPFS) even with `useCache: false`, which a headless browser's quota refuses for a
  // 1.3 GB file (Llama-3.2-1B's shape in Q8_0: QuotaExceededError).
  const blob = await (await fetch(`/files/${gguf}`)).blob();
  await engine.loadModel([blob], { n_threads: threads, n_ctx: 2048 });
  if (engine.getNumThreads() !== threads)
    throw new Error(`wllama runs ${engine.getNumThreads()} threads, not ${threads}`);
  return {
    name: `wllama ${quant} ${threads}t`,
    adapter: `llama.cpp ${Wllama.getLibllamaVersion?.() ?? ''} wasm, ${threads} thread${threads > 1 ? 's' : ''}`,
    async run() {
      const times = [];
      const start = performance.now();
      let timings = null;
      const stream = await engine.createCompletion({
        prompt,
        max_tokens: maxTokens,
        temp: 0,
        temperature: 0,
        ignore_eos: true,
        stream: true,
        // Every run reads its whole prompt, as ours does: with its prompt cache the runs after
        // the first read one token of it (prompt_n 1, a prefill figure of ~10 tok/s).
        cache_prompt: false,
      });
      for await (const chunk of stream) {
        if (chunk.choices?.[0]?.text !== undefined && chunk.choices[0].text !== '')
          times.push(performance.now() - start);
        if (chunk.timings) timings = chunk.timings;
      }
      return {
        tokens: times.length,
        decode_tps: decodeTps(times),
        own_tps: timings?.predicted_per_second ?? null,
        ttft_ms: times[0] ?? null,
        prefill_tps: timings?.prompt_per_second ?? null,
        prompt_n: timings?.prompt_n ?? null,
      };
    },
    close() {
      return engine.exit();
    },
  };
}

async function main() {
  const rows = [];
  for (const { quant, gguf } of configs) {
    const engines = [];
    for (const t of threadCounts) {
      for (const s of speculates) engines.push(await tokenometer(quant, t, s));
      if (withWllama) engines.push(await wllama(quant, gguf, t));
    }
    // One untimed run each, then interleaved timed runs.
    for (const e of engines) await e.run();
    const samples = engines.map(() => []);
    for (let i = 0; i < runs; i++) {
      for (const [k, e] of engines.entries()) {
        const r = await e.run();
        samples[k].push(r);
        log(
          `${e.name} run ${i + 1}: ${r.tokens} tokens, decode ${r.decode_tps?.toFixed(1)} tok/s (engine's own figure ${r.own_tps?.toFixed(1)}), TTFT ${r.ttft_ms?.toFixed(0)} ms, prefill ${r.prefill_tps?.toFixed(1)} tok/s (engine's own${r.prompt_n != null ? `, over ${r.prompt_n} prompt tokens` : ''})`,
        );
      }
    }
    for (const [k, e] of engines.entries()) {
      const perThreads = speculates.length + (withWllama ? 1 : 0);
      rows.push({
        engine: e.name,
        quant,
        threads: threadCounts[Math.floor(k / perThreads)],
        adapter: e.adapter,
        memory: e.memory ?? '',
        samples: samples[k],
      });
      await e.close();
    }
  }
  window.benchResult = { runs, maxTokens, prompt, userAgent: navigator.userAgent, rows };
  log('done');
}

main().catch((e) => {
  window.benchResult = { error: e.message ?? String(e) };
  log(`error: ${e.stack ?? e}`);
});
