// The page's endpoint client as strict as the command line's (tests/endpoint.rs plays it the same
// scripts): against a hostile OpenAI-compatible server on loopback (hostile_endpoint.mjs), an error
// body that never ends is read 64 KiB at most, a slow one within the endpoint's timeout; a 400 is
// asked again without the counting fields only when it names one; a 200 that is not an event
// stream, a stream cut without a finish reason or [DONE], one of only keep-alive comments and one
// longer than the request may take are each an error that says so. With the token inspector shown,
// the page asks for log probabilities and draws each token with its probability, says when an
// endpoint sends none, and asks again without them when one refuses the field. One test a case.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { openPage, pageSite } from './harness.mjs';
import { content, sse, startHostile } from './hostile_endpoint.mjs';

const site = pageSite({ webgpu: false });

/**
 * Run the page against `script` (`query`: more of the page's URL) to its end: `{ status, error,
 * output, posts, seconds, tokens }` (`tokens`: with `showTokens`, the token inspector's line and
 * each output mark's label and probability).
 * @param {import('./hostile_endpoint.mjs').Script} script
 * @param {string} [query]
 * @param {{ showTokens?: boolean }} [how]
 */
async function runAgainst(script, query = '', { showTokens = false } = {}) {
  const hostile = await startHostile(script);
  try {
    const url = `${site.base}/?endpoint=${encodeURIComponent(hostile.url)}&prompt=hi&max=8&chat=0&autorun=1${query}`;
    const { page, errors } = await openPage(site.browser, url, async (page) => {
      if (showTokens)
        await page.addInitScript(() => localStorage.setItem('tokenometer.showTokens', '1'));
    });
    await page.waitForFunction(
      () => ['done', 'error'].includes(document.querySelector('[data-testid=status]').textContent),
      null,
      { timeout: 120_000 },
    );
    // From the page's first request for an answer (its engine compiles before).
    const seconds = hostile.first.at ? (Date.now() - hostile.first.at) / 1000 : 0;
    const status = await page.getByTestId('status').textContent();
    const error = (await page.getByTestId('error').isHidden())
      ? ''
      : await page.getByTestId('error').textContent();
    const output = await page.locator('#run-view').getByTestId('output').textContent();
    const tokens = showTokens
      ? {
          line: await page.locator('#run-view').getByTestId('token-counts').textContent(),
          marks: await page.locator('#run-view .output-tokens .tok').evaluateAll((nodes) =>
            nodes.map((n) => ({
              label: n.getAttribute('aria-label'),
              logprob: /** @type {HTMLElement} */ (n).dataset.logprob ?? null,
            })),
          ),
        }
      : null;
    assert.deepEqual(errors, []);
    await page.close();
    return {
      status,
      error: error ?? '',
      output: output ?? '',
      posts: [...hostile.posts],
      seconds,
      tokens,
    };
  } finally {
    hostile.close();
  }
}

test('an error body that never ends, sent as fast as it is read, is cut at 64 KiB, not at the timeout', async () => {
  const run = await runAgainst(
    { status: 500, pieces: [[0, 'y'.repeat(16 << 10)]], endless: true },
    '&endpoint_timeout=60',
  );
  assert.equal(run.status, 'error');
  assert.match(run.error, /failed on the server's side \(500: yyyy/);
  assert.ok(run.seconds < 10, `${run.seconds} s: the cap, not the 60 s timeout, ended the reading`);
});

test("an error body that never ends, sent slowly, is read within the endpoint's timeout", async () => {
  const slow = Array.from(
    { length: 400 },
    () => /** @type {[number, string]} */ ([50, 'x'.repeat(1000)]),
  );
  const run = await runAgainst({ status: 500, pieces: slow }, '&endpoint_timeout=1');
  assert.equal(run.status, 'error');
  assert.match(run.error, /failed on the server's side \(500: x+/);
  assert.ok(run.seconds < 5, `${run.seconds} s`);
});

test("a 400 that names no counting field is the request's failure, not a reason to send it again", async () => {
  const run = await runAgainst({
    status: 400,
    pieces: [[0, JSON.stringify({ error: { message: 'model is loading' } })]],
  });
  assert.equal(run.status, 'error');
  assert.match(run.error, /answered \(400: model is loading\)/);
  assert.equal(run.posts.length, 1, 'sent once');
});

test('a 400 that names a counting field is asked once more without them, and the run completes', async () => {
  const finished = sse(
    JSON.stringify({ choices: [{ delta: { content: ' there' }, finish_reason: 'stop' }] }),
  );
  const run = await runAgainst({
    status: 200,
    strict: true,
    pieces: [
      [0, content('hello')],
      [0, finished],
      [0, 'data: [DONE]\r\n\r\n'],
    ],
  });
  assert.equal(run.status, 'done', run.error);
  assert.equal(run.posts.length, 2);
  assert.match(run.posts[0], /timings_per_token/);
  assert.doesNotMatch(run.posts[1], /timings_per_token/);
  assert.match(run.output, /hello there$/);
});

test('a 200 that is not an event stream is said as such, never a run of 0 tokens', async () => {
  const whole = JSON.stringify({
    choices: [{ message: { content: 'hello' }, finish_reason: 'stop' }],
  });
  const run = await runAgainst({ status: 200, ctype: 'application/json', pieces: [[0, whole]] });
  assert.equal(run.status, 'error');
  assert.match(
    run.error,
    /answered 200 with application\/json where an event stream was asked for \(it began "\{\\"choices/,
  );
});

test('a stream closed without a finish reason or [DONE] was cut off, and says so', async () => {
  const run = await runAgainst({ status: 200, pieces: [[0, content('a')]] });
  assert.equal(run.status, 'error');
  assert.match(run.error, /closed without a finish reason or \[DONE\]: the answer was cut off/);
});

test("a stream of keep-alive comments alone has stalled after the endpoint's timeout", async () => {
  const pings = [[0, content('a')], ...Array.from({ length: 60 }, () => [200, ': ping\n\n'])];
  const run = await runAgainst(
    { status: 200, pieces: /** @type {[number, string][]} */ (pings) },
    '&endpoint_timeout=1',
  );
  assert.equal(run.status, 'error');
  assert.match(
    run.error,
    /stalled: nothing but keep-alive comments for 1 s \(the page's endpoint_timeout\)/,
  );
  assert.ok(run.seconds < 5, `${run.seconds} s`);
});

test("a stream that goes on past the request's time is ended there, and says so", async () => {
  const slow = Array.from(
    { length: 100 },
    () => /** @type {[number, string]} */ ([100, content('a')]),
  );
  const run = await runAgainst({ status: 200, pieces: slow }, '&request_timeout=1&max=1000');
  assert.equal(run.status, 'error');
  assert.match(run.error, /did not finish the request within 1 s \(the page's request_timeout\)/);
  assert.ok(run.seconds < 5, `${run.seconds} s`);
});

test('a limit that is not a number of seconds is refused in words', async () => {
  const run = await runAgainst(
    { status: 200, pieces: [[0, content('a')]] },
    '&endpoint_timeout=soon',
  );
  assert.equal(run.status, 'error');
  assert.match(run.error, /endpoint_timeout=soon is not a number of seconds from above 0 to 86400/);
  assert.equal(run.posts.length, 0);
});

test('with tokens shown, the endpoint is asked for log probabilities and each token is drawn with its own', async () => {
  const chunk = (/** @type {object} */ choice) => sse(JSON.stringify({ choices: [choice] }));
  const run = await runAgainst(
    {
      status: 200,
      pieces: [
        [
          0,
          chunk({
            text: 'hello',
            logprobs: {
              tokens: ['hel', 'lo'],
              token_logprobs: [-0.5, -1.2],
              top_logprobs: [
                { hel: -0.5, he: -1.1 },
                { p: -0.9, lo: -1.2 },
              ],
            },
          }),
        ],
        [
          0,
          chunk({
            text: '!',
            logprobs: { tokens: ['!'], token_logprobs: [-3] },
            finish_reason: 'stop',
          }),
        ],
        [0, 'data: [DONE]\r\n\r\n'],
      ],
    },
    '',
    { showTokens: true },
  );
  assert.equal(run.status, 'done', run.error);
  // A completion (chat=0): `logprobs` is the alternatives' count.
  assert.equal(JSON.parse(run.posts[0]).logprobs, 5);
  const marks = run.tokens?.marks ?? [];
  assert.deepEqual(
    marks.map((m) => m.logprob),
    ['-0.5', '-1.2', '-3'],
  );
  assert.match(
    marks[0].label ?? '',
    /"hel", probability 60\.7% \(rank 1\); likeliest: "hel" 60\.7%, "he" 33\.3%/,
  );
  assert.match(
    marks[1].label ?? '',
    /"lo", probability 30\.1% \(rank 2\); likeliest: "p" 40\.7%, "lo" 30\.1%/,
  );
  assert.match(run.tokens?.line ?? '', /output 3 tokens.*as its log probabilities listed them/);
});

test('with tokens shown, an endpoint that sends no log probabilities is said to, and its chunks drawn', async () => {
  const run = await runAgainst(
    {
      status: 200,
      pieces: [
        [0, content('hello')],
        [
          0,
          sse(
            JSON.stringify({ choices: [{ delta: { content: ' there' }, finish_reason: 'stop' }] }),
          ),
        ],
        [0, 'data: [DONE]\r\n\r\n'],
      ],
    },
    '',
    { showTokens: true },
  );
  assert.equal(run.status, 'done', run.error);
  assert.equal(JSON.parse(run.posts[0]).logprobs, 5);
  assert.equal(run.tokens?.marks.length, 2);
  assert.match(
    run.tokens?.line ?? '',
    /output 2 chunks.*this endpoint sent no log probabilities, though the request asked for them/,
  );
});

test('a 400 that names logprobs is asked once more without them, and the inspector says it was refused', async () => {
  const run = await runAgainst(
    {
      status: 200,
      refuseLogprobs: true,
      pieces: [
        [0, content('hello')],
        [0, sse(JSON.stringify({ choices: [{ delta: {}, finish_reason: 'stop' }] }))],
        [0, 'data: [DONE]\r\n\r\n'],
      ],
    },
    '',
    { showTokens: true },
  );
  assert.equal(run.status, 'done', run.error);
  assert.equal(run.posts.length, 2);
  assert.match(run.posts[0], /"logprobs"/);
  assert.doesNotMatch(run.posts[1], /"logprobs"/);
  assert.match(run.output, /hello$/);
  assert.match(
    run.tokens?.line ?? '',
    /this endpoint refused the request's logprobs field, so it was asked again without/,
  );
});
