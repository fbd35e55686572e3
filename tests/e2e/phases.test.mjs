// Where a token's time goes, in the page: the CPU engine's own timers by phase (crate/model/phases.rs),
// averaged by the meter (crate/meter/phases.rs) and drawn as a column for each 16 decode tokens
// with a table of the mean step (www/phases.js). The timed parts sit inside the step (no moment
// counted twice), the step the engine timed accounts for the gap between tokens that decode tok/s
// is made of (within 10%), and the table's parts come to that gap.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { finishedReport, launchBrowser, openPage, pageSite } from './harness.mjs';

const site = pageSite({ webgpu: false });

test("the phase bar: the engine's parts inside each step, the steps making the gap between tokens", async (t) => {
  const prompt = encodeURIComponent('Write a short story about a lighthouse keeper.');
  const { page, errors } = await openPage(
    site.browser,
    `${site.base}/?model=smollm2-135m&backend=cpu&threads=1&max=49&autorun=1&prompt=${prompt}`,
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
  const view = page.locator('#run-view');
  const bar = view.getByTestId('phases');
  await bar.waitFor({ state: 'visible' });
  const tokens = Number(await view.getByTestId('metric-decode-tps').textContent());
  const columns = await bar
    .locator('.phase-column')
    .evaluateAll((nodes) =>
      nodes.map((n) => ({ step: Number(n.dataset.stepMs), parts: Number(n.dataset.partsMs) })),
    );
  const rows = await bar
    .locator('tbody tr')
    .evaluateAll((nodes) => nodes.map((n) => ({ part: n.dataset.part, ms: Number(n.dataset.ms) })));
  t.diagnostic(
    `decode ${tokens} tok/s; columns ${JSON.stringify(columns)}; table ${JSON.stringify(rows)}`,
  );
  // 48 decode tokens (49 less the first, which is the prefill's): three columns of 16 (fewer where the story ended early).
  assert.ok(columns.length >= 1 && columns.length <= 3, `${columns.length} columns`);
  for (const c of columns)
    assert.ok(
      c.step > 0 && c.parts > 0.5 * c.step && c.parts <= c.step * 1.001,
      `the timed parts inside the step: ${JSON.stringify(c)}`,
    );
  const gap = 1000 / tokens;
  const sum = rows.reduce((s, r) => s + r.ms, 0);
  const between = rows.find((r) => r.part.startsWith('between'))?.ms ?? 0;
  assert.ok(
    Math.abs(sum - gap) <= 0.1 * gap,
    `the table's parts ${sum.toFixed(3)} ms against the gap between tokens ${gap.toFixed(3)} ms`,
  );
  assert.ok(
    between <= 0.1 * gap,
    `the engine's timed step ${(sum - between).toFixed(3)} ms is within 10% of the gap ${gap.toFixed(3)} ms`,
  );
  assert.ok(
    rows.find((r) => r.part === 'projections').ms > rows.find((r) => r.part === 'sampling').ms,
    'projections outweigh sampling',
  );
  assert.deepEqual(errors, []);
  await page.close();
});

test("on WebGPU: the device's timestamps around each run of dispatches of one kind (CubeCL's profile windows), one decode step in 8, inside the step", async (t) => {
  // SwiftShader here has timestamp-query: a software GPU, so the times say nothing of a real one;
  // what is checked is that every kind of dispatch is timed, inside its step, and that sampling
  // is the pick's dispatch, not the host's wait for the whole step.
  const gpuBrowser = await launchBrowser({ webgpu: true });
  try {
    const { page, errors } = await openPage(
      gpuBrowser,
      `${site.base}/?model=stories260K&backend=wgpu&quant=q8&max=33&autorun=1&prompt=${encodeURIComponent('Once upon a time')}`,
    );
    const report = await finishedReport(page);
    const phases = report.phases;
    t.diagnostic(
      `decode ${report.decode_tps} tok/s; ${JSON.stringify(phases?.decode)}; gap ${phases?.gap_ms} ms`,
    );
    assert.ok(phases, 'a GPU run with timestamp-query has phases');
    const decoded = report.conditions.output_tokens - 1;
    // The prompt's step is timed, then decode steps 1, 9, 17, ... of the scheduler's count.
    assert.equal(phases.steps, Math.ceil(decoded / 8), `timed decode steps of ${decoded}`);
    for (const w of phases.windows) {
      for (const kind of ['projections_ms', 'attention_ms', 'classifier_ms', 'sampling_ms'])
        assert.ok(w[kind] > 0, `${kind} timed: ${JSON.stringify(w)}`);
      assert.equal(w.norms_ms, 0, 'norms are inside the other dispatches');
      const parts = w.projections_ms + w.attention_ms + w.classifier_ms + w.sampling_ms;
      assert.ok(parts <= w.step_ms, `the device's parts inside the step: ${JSON.stringify(w)}`);
      assert.ok(
        w.sampling_ms < 0.25 * w.step_ms,
        `sampling is the pick, not the wait: ${JSON.stringify(w)}`,
      );
    }
    const bar = page.locator('#run-view').getByTestId('phases');
    await bar.waitFor({ state: 'visible' });
    assert.match(
      await bar.locator('figcaption').textContent(),
      /by the device's timestamps around each run of dispatches of one kind \(one step in 8/,
    );
    const parts = await bar
      .locator('tbody tr')
      .evaluateAll((nodes) => nodes.map((n) => n.dataset.part));
    assert.ok(
      !parts.includes('norms and activations') && parts.includes('classifier'),
      JSON.stringify(parts),
    );
    assert.equal(await bar.locator('.phase-column').count(), phases.windows.length);
    assert.deepEqual(errors, []);
    await page.close();
  } finally {
    await gpuBrowser.close();
  }
});
