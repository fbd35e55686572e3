// The token inspector ("Show tokens"): a greedy run of stories260K drawn token by token, each
// drawn token's id and probability the engine's own (equal to `tokenometer score` on the same ids,
// natively: target/debug/tokenometer, built by `cargo test`), the prompt's tokens drawn too, the
// likeliest alternatives in each token's label, keyboard-reachable details, and live counts
// beside the rule of thumb. A replay draws the same tokens.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { resolve } from 'node:path';
import { finishedReport, openPage, pageSite, root } from './harness.mjs';

const site = pageSite();
const binary = resolve(root, 'target/debug/tokenometer');

test("Show tokens draws each token with its id and the engine's own probability, equal to score's", async () => {
  assert.ok(existsSync(binary), `${binary} is missing: cargo test (or cargo build) makes it`);
  const { page, errors } = await openPage(
    site.browser,
    `${site.base}/?model=stories260K&prompt=Once%20upon%20a%20time&max=30&backend=cpu&quant=f32`,
  );
  const view = page.locator('#run-view');
  await view.getByTestId('show-tokens').check();
  await page.getByTestId('run').click();
  await page.waitForFunction(
    () => document.querySelector('[data-testid=status]').textContent === 'done',
    null,
    { timeout: 120_000 },
  );
  const drawn = await page.evaluate(() => {
    const tokens = (/** @type {string} */ where) =>
      [...document.querySelectorAll(`#run-view ${where} [data-token-id]`)].map((el) => {
        const node = /** @type {HTMLElement} */ (el);
        return {
          id: Number(node.dataset.tokenId),
          logprob: node.dataset.logprob === undefined ? null : Number(node.dataset.logprob),
          rank: Number(node.dataset.rank),
          label: node.getAttribute('aria-label'),
          text: node.textContent,
        };
      });
    return {
      prompt: tokens('.prompt-tokens'),
      output: tokens('.output-tokens'),
      counts: document.querySelector('#run-view [data-testid=token-counts]').textContent,
    };
  });
  // stories260K's prompt: BOS and 4 tokens; 30 generated.
  assert.equal(drawn.prompt.length, 5, JSON.stringify(drawn.prompt));
  assert.equal(drawn.output.length, 30);
  const output = await view.getByTestId('output').textContent();
  assert.ok(output.startsWith('Once upon a time, there was a little girl named Lily.'), output);
  assert.equal(
    drawn.output.map((t) => t.text).join(''),
    output.slice('Once upon a time'.length),
    'the tokens spell the text',
  );
  // Greedy: every token is the likeliest (rank 1), and its label lists 5 alternatives.
  for (const t of drawn.output) {
    assert.equal(t.rank, 1, t.label);
    assert.match(
      t.label,
      /^Output token \d+: id \d+, ".*", probability [\d.e+-]+% \(rank 1\); likeliest: (".*" [\d.e+-]+%(, )?){5}$/,
      t.label,
    );
  }
  assert.match(
    drawn.counts,
    /^Prompt 5 tokens; output 30 tokens: [\d.]+ characters a token, [\d.]+ tokens a word \(the rule of thumb for English: about 4 characters a token, 1\.3 tokens a word\)\.$/,
  );
  // The same ids scored natively, teacher-forced in one pass: the same log probabilities (the
  // page's wasm SIMD kernels against the native ones; measured 2026-11-29: within 2e-6).
  const scored = execFileSync(
    binary,
    [
      'score',
      '--model',
      resolve(root, 'models/stories260K/stories260K.bin'),
      '--tokenizer',
      resolve(root, 'models/stories260K/tok512.bin'),
      '--threads',
      '1',
      '--json',
      '--prompt-ids',
      drawn.prompt.map((t) => t.id).join(','),
      '--ids',
      drawn.output.map((t) => t.id).join(','),
    ],
    { encoding: 'utf8' },
  )
    .trim()
    .split('\n')
    .map((line) => JSON.parse(line));
  assert.equal(scored.length, 30);
  let worst = 0;
  for (const [i, s] of scored.entries()) {
    assert.equal(s.id, drawn.output[i].id);
    worst = Math.max(worst, Math.abs(s.logprob - drawn.output[i].logprob));
  }
  assert.ok(worst < 1e-4, `the page's logprobs differ from score's by ${worst}`);
  // Keyboard: a token takes focus and its details show.
  await view.locator('.output-tokens [data-token-id]').nth(3).focus();
  assert.equal(await view.getByTestId('token-details').textContent(), drawn.output[3].label);
  // Hidden, the text is back; shown again, the same tokens.
  await view.getByTestId('show-tokens').uncheck();
  await view.getByTestId('token-view').waitFor({ state: 'hidden' });
  assert.equal(await view.getByTestId('output').isVisible(), true);
  assert.deepEqual(errors, []);
  await page.close();
});

test('Show tokens turned on after a speculating run shows every token with its probability and alternatives', async () => {
  // Hidden while it runs, with prompt lookup keeping two drafts a step: the engine keeps each
  // token's probability and 5 alternatives anyway, kept drafts included.
  const prompt = encodeURIComponent(
    'Lily and Ben went to the park. Lily and Ben went to the park. Lily and Ben',
  );
  const { page, errors } = await openPage(
    site.browser,
    `${site.base}/?model=stories260K&prompt=${prompt}&max=100&backend=cpu&quant=f32&drafts=2&autorun=1`,
  );
  const view = page.locator('#run-view');
  await finishedReport(page);
  await page.getByTestId('speculate').selectOption('lookup');
  await page.getByTestId('run').click();
  await page.waitForFunction(
    () =>
      document
        .querySelector('#run-view [data-testid=conditions]')
        .textContent.includes('speculative: prompt lookup'),
    null,
    { timeout: 120_000 },
  );
  await finishedReport(page);
  const drafted = await view.getByTestId('output').locator('mark.drafted').count();
  assert.ok(drafted > 3, `only ${drafted} drafts kept`);
  await view.getByTestId('show-tokens').check();
  await page.waitForFunction(
    () => document.querySelectorAll('#run-view .output-tokens [data-token-id]').length >= 100,
  );
  const output = await page.evaluate(() =>
    [...document.querySelectorAll('#run-view .output-tokens [data-token-id]')].map((el) => ({
      logprob: /** @type {HTMLElement} */ (el).dataset.logprob,
      rank: /** @type {HTMLElement} */ (el).dataset.rank,
      label: el.getAttribute('aria-label'),
    })),
  );
  assert.equal(output.length, 100);
  for (const t of output) {
    assert.equal(t.rank, '1', t.label);
    assert.ok(Number(t.logprob) <= 0, t.label);
    assert.match(
      t.label,
      /probability [\d.e+-]+% \(rank 1\); likeliest: (".*" [\d.e+-]+%(, )?){5}$/,
    );
  }
  assert.deepEqual(errors, []);
  await page.close();
});
