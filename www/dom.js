// @ts-check
// What the page's components share for building their views: each fills its root from a template
// and finds its parts by their `data-ref` names, so that the same component can appear more than
// once on the page (ids would clash).

/**
 * Every element under `root` with a `data-ref`, by that name.
 * @param {HTMLElement} root
 * @returns {Record<string, any>}
 */
export function refs(root) {
  /** @type {Record<string, any>} */
  const found = {};
  for (const node of root.querySelectorAll('[data-ref]'))
    found[/** @type {HTMLElement} */ (node).dataset.ref ?? ''] = node;
  return found;
}

/**
 * Fill `input` with a default `value` that arrived later (the engine's defaults), unless someone
 * has already put a value there or is typing into it: a default that lands mid-typing would be
 * joined to what is typed ("4" typed + "4" default = "44").
 * @param {HTMLInputElement} input
 * @param {string | number} value
 */
export function fillDefault(input, value) {
  if (input.value === '' && input.ownerDocument.activeElement !== input)
    input.value = String(value);
}

/**
 * Fill a select with `[value, label]` choices.
 * @param {HTMLSelectElement} select
 * @param {[string, string][]} choices
 */
export function fillSelect(select, choices) {
  for (const [value, label] of choices) select.add(new Option(label, value));
}
