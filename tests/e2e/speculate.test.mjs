// End-to-end: speculative decoding in the page. A preset runs prompt lookup and the loaded model
// at q4 as draft, each giving the text of plain decoding, with the kept drafts tinted as they come
// and the meter's speculation figures and steps' costs filled in, with fixed draft lengths
// (`drafts=2`) and with the lengths measured costs favour; Share keeps the choice; lanes compare
// with and without side by side; a bad choice is named.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { openPage, pageSite } from './harness.mjs';

const site = pageSite({ webgpu: false });

const open = (query, prepare) => openPage(site.browser, `${site.base}/?${query}`, prepare);

const view = (page) => page.locator('#run-view');
const finished = (page) =>
  page.waitForFunction(
    () => ['done', 'error'].includes(document.querySelector('[data-testid=status]').textContent),
    null,
    { timeout: 300_000 },
  );
// stories260K repeats itself: prompt lookup finds n-grams to copy.
const PROMPT = encodeURIComponent(
  'Lily and Ben went to the park. Lily and Ben went to the park. Lily and Ben',
);

// What a run of `choice` shows, after a plain run: the plain text, the conditions, kept drafts
// tinted, the figures and the steps' costs.
async function speculates(page, choice, described, plain) {
  await page.getByTestId('speculate').selectOption(choice);
  await page.getByTestId('run').click();
  await page.waitForFunction(
    (d) => document.querySelector('#run-view [data-testid=conditions]').textContent.includes(d),
    described,
    { timeout: 120_000 },
  );
  await finished(page);
  assert.equal(
    await page.getByTestId('error').isHidden(),
    true,
    await page.getByTestId('error').textContent(),
  );
  assert.equal(await view(page).getByTestId('output').textContent(), plain, choice);
  return view(page).getByTestId('speculation-steps').textContent();
}

test("speculate=lookup and speculate=draft give plain decoding's text, tint the kept drafts and report them", async () => {
  // drafts=2: two drafts every step, so that drafts are made whatever the machine's timings.
  const { page, errors } = await open(
    `model=stories260K&backend=cpu&quant=f32&max=100&prompt=${PROMPT}&drafts=2&autorun=1`,
  );
  await finished(page);
  assert.equal(
    await page.getByTestId('error').isHidden(),
    true,
    await page.getByTestId('error').textContent(),
  );
  const plain = await view(page).getByTestId('output').textContent();
  assert.equal(await view(page).getByTestId('output').locator('mark.drafted').count(), 0);
  assert.equal(await view(page).getByTestId('metric-acceptance').textContent(), '–');
  assert.equal(await view(page).getByTestId('speculation-steps').isHidden(), true);
  for (const [choice, described] of [
    ['lookup', 'speculative: prompt lookup (n-grams up to 3, 2 drafts a step, fixed)'],
    ['draft', 'speculative: draft model stories260K q4 (2 drafts a step, fixed)'],
  ]) {
    const steps = await speculates(page, choice, described, plain);
    assert.ok(
      (await view(page).getByTestId('output').locator('mark.drafted').count()) > 3,
      `${choice}: kept drafts are tinted`,
    );
    assert.equal(await view(page).getByTestId('drafted-legend').isVisible(), true);
    const acceptance = Number(await view(page).getByTestId('metric-acceptance').textContent());
    assert.ok(acceptance > 0 && acceptance <= 100, `${choice}: acceptance ${acceptance}`);
    assert.ok(Number(await view(page).getByTestId('metric-passes-per-token').textContent()) < 1);
    // The steps' costs by drafts, from the meter: steps of 2 drafts, against plain ones if any.
    assert.match(
      steps,
      /^step time, median: .*2 drafts [\d.]+ ms( = [\d.]+ plain)? \(\d+ steps?\)/,
      steps,
    );
    await page.getByTestId('share').click();
    const shared = new URL(await page.getByTestId('share-url').inputValue()).searchParams;
    assert.equal(shared.get('speculate'), choice);
    assert.equal(shared.get('drafts'), '2');
  }
  assert.deepEqual(errors, []);
  await page.close();
  // Without drafts=N, lookup drafts as the measured costs favour (how many depends on this
  // machine's timings; the text does not) and the draft model 3 a step.
  const measured = await open(
    `model=stories260K&backend=cpu&quant=f32&max=100&prompt=${PROMPT}&autorun=1`,
  );
  await finished(measured.page);
  assert.equal(await view(measured.page).getByTestId('output').textContent(), plain);
  const steps = await speculates(
    measured.page,
    'lookup',
    'speculative: prompt lookup (n-grams up to 3, drafts up to 8, as measured costs favour)',
    plain,
  );
  // The first step is timed without drafts.
  assert.match(steps, /^step time, median: no draft [\d.]+ ms/, steps);
  await speculates(
    measured.page,
    'draft',
    'speculative: draft model stories260K q4 (3 drafts a step, fixed)',
    plain,
  );
  await measured.page.getByTestId('share').click();
  assert.equal(
    new URL(await measured.page.getByTestId('share-url').inputValue()).searchParams.get('drafts'),
    null,
  );
  assert.deepEqual(measured.errors, []);
  await measured.page.close();
});

test('lanes compare with and without speculation side by side', async () => {
  const { page, errors } = await open(
    `model=stories260K&max=80&prompt=${PROMPT}&lanes=cpu:f32,cpu:f32::lookup&lanes_run=sequential&drafts=2&autorun=1`,
  );
  await page.waitForFunction(
    () =>
      ['done', 'error'].includes(document.querySelector('[data-testid=lanes-status]').textContent),
    null,
    { timeout: 300_000 },
  );
  assert.equal(await page.getByTestId('lanes-status').textContent(), 'done');
  const lanes = page.getByTestId('lane');
  assert.match(await lanes.nth(1).locator('h3').textContent(), /speculating \(lookup\)/);
  assert.equal(await lanes.nth(0).getByTestId('output').locator('mark.drafted').count(), 0);
  assert.ok((await lanes.nth(1).getByTestId('output').locator('mark.drafted').count()) > 0);
  assert.match(
    await page.getByTestId('lane-verdict').first().textContent(),
    /same first 40 tokens: yes/,
  );
  // Share keeps the lanes with their speculation.
  await page.getByTestId('share').click();
  const shared = new URL(await page.getByTestId('share-url').inputValue()).searchParams;
  assert.equal(shared.get('lanes'), 'cpu:f32,cpu:f32::lookup');
  assert.equal(shared.get('drafts'), '2');
  assert.deepEqual(errors, []);
  await page.close();
  const bad = await open(
    'model=stories260K&speculate=maybe&lanes=cpu:f32::guess&drafts=9&autorun=1',
  );
  const message = await bad.page.getByTestId('error').textContent();
  assert.match(message, /drafts=9 is not a number of drafts from 1 to 8/, message);
  assert.match(message, /speculate=maybe is not a choice \(off, lookup, draft\)/, message);
  assert.match(message, /speculate "guess" is not a choice \(off, lookup, draft\)/, message);
  await bad.page.close();
});
