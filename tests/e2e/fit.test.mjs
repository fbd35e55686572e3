// Will it fit, before the download (crate/api/fit.rs, www/worker.js `fitOf`): the page reads a
// GGUF's header with range requests and refuses a model this browser cannot hold in one sentence
// that names what would fit, before a byte of its tensors is fetched; a model that fits says
// what it will take, and the weights it counted are what the engine then holds.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import { openPage, pageSite } from './harness.mjs';

const site = pageSite({ webgpu: false });
let host;
/** @type {{ range: string | null, from: number, to: number }[]} every request the model's host answered */
const requests = [];

/**
 * The header of a GGUF shaped like Llama 3.2 1B (16 layers of 2,048, 8,192 hidden, a 128,256-word
 * tied vocabulary) in f16: 2.5 GB of tensors that are never written. Returns the header and the
 * file's length.
 */
function bigHeader() {
  const parts = [];
  const u32 = (n) => {
    const b = Buffer.alloc(4);
    b.writeUInt32LE(n);
    parts.push(b);
  };
  const u64 = (n) => {
    const b = Buffer.alloc(8);
    b.writeBigUInt64LE(BigInt(n));
    parts.push(b);
  };
  const f32 = (n) => {
    const b = Buffer.alloc(4);
    b.writeFloatLE(n);
    parts.push(b);
  };
  const str = (s) => {
    u64(Buffer.byteLength(s));
    parts.push(Buffer.from(s));
  };
  const [dim, hidden, layers, heads, kvHeads, vocab] = [2048, 8192, 16, 32, 8, 128256];
  const kv = (dim / heads) * kvHeads;
  const tensors = [
    ['token_embd.weight', [dim, vocab]],
    ['output_norm.weight', [dim]],
  ];
  for (let l = 0; l < layers; l++) {
    for (const [name, dims] of [
      ['attn_norm', [dim]],
      ['ffn_norm', [dim]],
      ['attn_q', [dim, dim]],
      ['attn_k', [dim, kv]],
      ['attn_v', [dim, kv]],
      ['attn_output', [dim, dim]],
      ['ffn_gate', [dim, hidden]],
      ['ffn_up', [dim, hidden]],
      ['ffn_down', [hidden, dim]],
    ]) {
      tensors.push([`blk.${l}.${name}.weight`, dims]);
    }
  }
  const meta = [
    ['general.architecture', 8, 'llama'],
    ['llama.block_count', 4, layers],
    ['llama.context_length', 4, 8192],
    ['llama.embedding_length', 4, dim],
    ['llama.feed_forward_length', 4, hidden],
    ['llama.attention.head_count', 4, heads],
    ['llama.attention.head_count_kv', 4, kvHeads],
    ['llama.rope.freq_base', 6, 500000],
    ['llama.attention.layer_norm_rms_epsilon', 6, 1e-5],
  ];
  parts.push(Buffer.from('GGUF'));
  u32(3);
  u64(tensors.length);
  u64(meta.length);
  for (const [key, type, value] of meta) {
    str(key);
    u32(type);
    if (type === 8) str(value);
    else if (type === 4) u32(value);
    else f32(value);
  }
  let offset = 0;
  for (const [name, dims] of tensors) {
    str(name);
    u32(dims.length);
    for (const d of dims) u64(d);
    const norm = dims.length === 1;
    u32(norm ? 0 : 1); // F32 norms, F16 matrices
    u64(offset);
    offset += Math.ceil((dims.reduce((a, b) => a * b, 1) * (norm ? 4 : 2)) / 32) * 32;
  }
  const header = Buffer.concat(parts);
  const start = Math.ceil(header.length / 32) * 32;
  return {
    header: Buffer.concat([header, Buffer.alloc(start - header.length)]),
    length: start + offset,
  };
}

before(async () => {
  const { header, length } = bigHeader();
  // Another origin, as a model host: it honours ranges (zeros past the header: the tensors that
  // were never written) and records every request.
  host = createServer((req, res) => {
    const m = /^bytes=(\d+)-(\d+)$/.exec(req.headers.range ?? '');
    const [from, to] = m ? [Number(m[1]), Number(m[2]) + 1] : [0, length];
    requests.push({ range: req.headers.range ?? null, from, to });
    const headers = {
      'Access-Control-Allow-Origin': '*',
      'Access-Control-Expose-Headers': 'Content-Range',
      'Cross-Origin-Resource-Policy': 'cross-origin',
      'Accept-Ranges': 'bytes',
    };
    if (!m || to > length) {
      res.writeHead(416, headers).end();
      return;
    }
    const body = Buffer.alloc(to - from);
    header.subarray(from, Math.min(to, header.length)).copy(body);
    res
      .writeHead(206, {
        ...headers,
        'Content-Range': `bytes ${from}-${to - 1}/${length}`,
        'Content-Length': String(to - from),
      })
      .end(body);
  });
  await new Promise((ok) => host.listen(0, '127.0.0.1', ok));
});

after(async () => {
  host?.close();
});

test('a model too big for this browser is refused before its download, naming what fits', async () => {
  const url = `http://127.0.0.1:${host.address().port}/llama-1b-f16.gguf`;
  const { page, errors } = await openPage(
    site.browser,
    `${site.base}/?model=${encodeURIComponent(url)}&backend=cpu&quant=stored&max=64&autorun=1&prompt=Hi`,
  );
  await page.waitForFunction(
    () => ['done', 'error'].includes(document.querySelector('[data-testid=status]').textContent),
    null,
    { timeout: 120_000 },
  );
  const error = await page.getByTestId('error').textContent();
  assert.match(
    error,
    /^llama-1b-f16 cannot run in this browser: as stored it would take [\d.]+ GB \(weights [\d.]+ GB, keys and values [\d.]+ MB at \d+ positions, scratch [\d.]+ [MG]B\), but the engine holds at most 4\.29 GB \(wasm32's memory\): choose q8 \([\d.]+ GB\) or q4 \([\d.]+ GB\); only its header was downloaded/,
  );
  // Only ranges, and no more than twice the header (it is read 256 KiB, then as much again, until
  // it is whole): the file's 2.5 GB of tensors are never asked for.
  const headerBytes = bigHeader().header.length;
  const served = requests.reduce((n, r) => n + r.to - r.from, 0);
  assert.ok(requests.length >= 1 && requests.every((r) => r.range), JSON.stringify(requests));
  assert.ok(
    served <= Math.max(256 << 10, 2 * headerBytes),
    `${served} bytes served for a ${headerBytes}-byte header: ${JSON.stringify(requests)}`,
  );
  assert.deepEqual(errors, []);
  await page.close();
});

test('a model that fits says what it takes, and the weights it counted are what loading holds', async () => {
  const { page, errors } = await openPage(
    site.browser,
    `${site.base}/?model=smollm2-135m&backend=cpu&threads=1&max=4&autorun=1&prompt=Hi`,
  );
  await page.waitForFunction(
    () => ['done', 'error'].includes(document.querySelector('[data-testid=status]').textContent),
    null,
    { timeout: 300_000 },
  );
  assert.equal(
    await page.getByTestId('error').isHidden(),
    true,
    await page.getByTestId('error').textContent(),
  );
  const fit = await page.getByTestId('fit').textContent();
  const m =
    /^Will it fit: as stored it takes about [\d.]+ MB \(weights ([\d.]+) MB, keys and values [\d.]+ MB at \d+ positions, scratch [\d.]+ MB\), within 4\.29 GB/.exec(
      fit ?? '',
    );
  assert.ok(m, fit);
  const conditions = await page.locator('#run-view').getByTestId('conditions').textContent();
  const held = /stored, ([\d.]+) MB\)/.exec(conditions ?? '');
  assert.ok(held, conditions);
  assert.ok(
    Math.abs(Number(m[1]) / Number(held[1]) - 1) < 0.01,
    `counted ${m[1]} MB, held ${held[1]} MB`,
  );
  assert.deepEqual(errors, []);
  await page.close();
});
