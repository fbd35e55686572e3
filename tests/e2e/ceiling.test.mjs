// The decode's bandwidth ceiling in the page: this device's memory read bandwidth, measured once
// in a worker of its own at the engine's threads and kept (www/ceiling.js), over the bytes a
// token reads, as the meter reports it (`bandwidth_ceiling`). The page's figure is within a
// factor of 3 of the native one on this machine (target/debug/tokenometer bench, built by `cargo
// test`), the ceiling rises as the quantization reads fewer bytes (q4 over q8 over f32 on one
// file), and the gauge beside the needle says which bound holds, in the meter's sentence.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { resolve } from 'node:path';
import { finishedReport, launchBrowser, openPage, pageSite, root } from './harness.mjs';

const site = pageSite({ webgpu: false });
const binary = resolve(root, 'target/debug/tokenometer');

const figure = async (page, id) =>
  Number(await page.locator('#run-view').getByTestId(id).textContent());

test('the bandwidth ceiling: measured in the page near the native figure, higher for fewer bytes a token, and said beside the needle', async (t) => {
  assert.ok(existsSync(binary), `${binary} is missing: cargo test (or cargo build) makes it`);
  const { page, errors } = await openPage(
    site.browser,
    `${site.base}/?model=stories260K-gguf&backend=cpu&threads=1&max=40&prompt=${encodeURIComponent('Once upon a time')}`,
  );
  await page.waitForFunction(() => document.querySelector('[data-testid=max]').value !== '', null, {
    timeout: 60_000,
  });
  const ceilings = {};
  for (const quant of ['f32', 'q8', 'q4']) {
    await page.getByTestId('quant').selectOption(quant);
    await page.getByTestId('run').click();
    await page.waitForFunction(
      () => ['done', 'error'].includes(document.querySelector('[data-testid=status]').textContent),
      null,
      { timeout: 120_000 },
    );
    assert.equal(
      await page.getByTestId('error').isHidden(),
      true,
      await page.getByTestId('error').textContent(),
    );
    ceilings[quant] = {
      tps: await figure(page, 'metric-ceiling-tps'),
      share: await figure(page, 'metric-ceiling-share'),
      gbps: await figure(page, 'metric-device-gbps'),
      decode: await figure(page, 'metric-decode-tps'),
      sentence: await page.locator('#run-view').getByTestId('ceiling-sentence').textContent(),
      gauge: await page
        .locator('#run-view')
        .getByTestId('ceiling-gauge')
        .evaluate((m) => /** @type {HTMLMeterElement} */ (m).value),
    };
  }
  // One measurement, kept: every run shows the same bandwidth.
  assert.ok(
    ceilings.f32.gbps > 0 &&
      ceilings.q8.gbps === ceilings.f32.gbps &&
      ceilings.q4.gbps === ceilings.f32.gbps,
    JSON.stringify(ceilings),
  );
  assert.ok(
    ceilings.q4.tps > ceilings.q8.tps && ceilings.q8.tps > ceilings.f32.tps,
    `q4 over q8 over f32: ${JSON.stringify(ceilings)}`,
  );
  for (const [quant, c] of Object.entries(ceilings)) {
    // The share is the run's decode over the ceiling (rounded as drawn).
    assert.ok(
      Math.abs(c.share - (100 * c.decode) / c.tps) <= 1 + ((100 * c.decode) / c.tps) * 0.02,
      `${quant}: ${JSON.stringify(c)}`,
    );
    assert.match(
      c.sentence,
      /^Reading [\d.]+ MB a token \(weights [\d.]+ MB, keys and values [\d.]+ MB\) at [\d.]+ GB\/s allows \d+ tok\/s; this run makes \d+: \d+% of it, so (caches held|memory is what holds|memory is not all)/,
    );
    assert.ok(
      Math.abs(c.gauge - Math.min(1, c.share / 100)) < 0.02,
      `${quant}: gauge ${c.gauge}, share ${c.share}%`,
    );
  }
  const kept = await page.evaluate(() => localStorage.getItem('tokenometer-read-gbps'));
  assert.match(kept ?? '', /"relaxed:1":/);
  assert.deepEqual(errors, []);
  await page.close();
  // The native figure on the same machine, one thread (bench measures after its runs).
  const bench = JSON.parse(
    execFileSync(
      binary,
      [
        'bench',
        '--model',
        resolve(root, 'models/stories260K/stories260K-q8_0.gguf'),
        '--runs',
        '1',
        '--max-tokens',
        '8',
        '--threads',
        '1',
        '--json',
      ],
      { encoding: 'utf8' },
    ),
  );
  const native = bench[0].bandwidth_ceiling.read_gb_per_s;
  const ratio = ceilings.f32.gbps / native;
  t.diagnostic(
    `page ${ceilings.f32.gbps} GB/s, native ${native.toFixed(1)} GB/s (1 thread); ceilings f32 ${ceilings.f32.tps}, q8 ${ceilings.q8.tps}, q4 ${ceilings.q4.tps} tok/s; shares ${ceilings.f32.share}%, ${ceilings.q8.share}%, ${ceilings.q4.share}%`,
  );
  assert.ok(
    ratio > 1 / 3 && ratio < 3,
    `the page's ${ceilings.f32.gbps} GB/s against native ${native.toFixed(1)} GB/s: ${ratio.toFixed(2)}x`,
  );
});

test("on WebGPU: the GPU's read bandwidth and its dispatch floor, measured once per adapter and said beside the needle", async (t) => {
  // SwiftShader here: a software GPU, so the figures say nothing of a real one; the arithmetic
  // and the page's wiring are what is checked.
  const gpuBrowser = await launchBrowser({ webgpu: true });
  try {
    const { page, errors } = await openPage(
      gpuBrowser,
      `${site.base}/?model=stories260K&backend=wgpu&quant=q8&max=12&autorun=1&prompt=${encodeURIComponent('Once upon a time')}`,
    );
    const report = await finishedReport(page);
    const { bandwidth_ceiling: ceiling, dispatch_floor: floor } = report;
    t.diagnostic(
      `GPU ${ceiling?.read_gb_per_s} GB/s, ${floor?.dispatch_us} us a dispatch, ${floor?.dispatches_per_token} dispatches a token: floor ${floor?.tps} tok/s, decode ${report.decode_tps}`,
    );
    assert.ok(ceiling.read_gb_per_s > 0 && ceiling.tps > 0, JSON.stringify(ceiling));
    // stories260K: 4 dispatches a layer, 5 layers, and 2 more a step (the prefill's few more
    // spread over 12 tokens).
    assert.ok(
      floor.dispatches_per_token >= 22 && floor.dispatches_per_token < 26,
      JSON.stringify(floor),
    );
    assert.ok(
      Math.abs(floor.tps - 1e6 / (floor.dispatches_per_token * floor.dispatch_us)) <
        1e-6 * floor.tps,
      JSON.stringify(floor),
    );
    assert.ok(Math.abs(floor.share - report.decode_tps / floor.tps) < 1e-9, JSON.stringify(floor));
    assert.equal(Number(await figure(page, 'metric-dispatch-floor-tps')), Math.round(floor.tps));
    const sentence = await page.locator('#run-view').getByTestId('ceiling-sentence').textContent();
    assert.match(
      sentence,
      /^Reading [\d.]+ MB a token .* A token takes \d+ dispatches at [\d.]+ us each \(an empty kernel's, measured apart\), which allows \d+ tok\/s; this run makes \d+: \d+% of it\.$/,
    );
    const kept = await page.evaluate(() =>
      JSON.parse(localStorage.getItem('tokenometer-gpu-ceilings') ?? '{}'),
    );
    assert.equal(Object.keys(kept).length, 1, JSON.stringify(kept));
    assert.deepEqual(errors, []);
    await page.close();
  } finally {
    await gpuBrowser.close();
  }
});
