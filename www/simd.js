// @ts-check
// Which build of the engine a worker runs (`make pkg`): 'relaxed' (pkg/relaxed/, relaxed SIMD:
// fused f32 multiply-adds and Q4_0 byte products) where the browser runs it, or 'baseline' (pkg/,
// SIMD128) in any browser. The page's choice starts as its URL's `simd=` and follows the form's
// "CPU engine" select; each engine client starts its worker with it (engine-client.js), and the
// worker loads that build (worker.js).

/** A module with one `i16x8.relaxed_dot_i8x16_i7x16_s`: a browser without relaxed SIMD refuses it. */
const RELAXED_PROBE = new Uint8Array([
  0x00,
  0x61,
  0x73,
  0x6d,
  0x01,
  0x00,
  0x00,
  0x00, // "\0asm", version 1
  0x01,
  0x05,
  0x01,
  0x60,
  0x00,
  0x01,
  0x7b, // a type: () -> v128
  0x03,
  0x02,
  0x01,
  0x00, // one function of that type
  0x0a,
  0x2b,
  0x01,
  0x29,
  0x00, // its code: no locals,
  0xfd,
  0x0c,
  ...new Array(16).fill(0), // v128.const 0
  0xfd,
  0x0c,
  ...new Array(16).fill(0), // v128.const 0
  0xfd,
  0x92,
  0x02,
  0x0b, // i16x8.relaxed_dot_i8x16_i7x16_s, end
]);

/** Whether this browser runs relaxed SIMD. */
export const relaxedSimd = () => WebAssembly.validate(RELAXED_PROBE);

/**
 * The builds, `[simd= name, label]`: the form's "CPU engine" select is filled from this list.
 * @type {[string, string][]}
 */
export const SIMD_CHOICES = [
  ['relaxed', 'relaxed SIMD (where supported)'],
  ['baseline', 'baseline SIMD128'],
];
/** The builds, as `simd=` names them. */
export const SIMD_BUILDS = SIMD_CHOICES.map(([value]) => value);

let chosen =
  new URLSearchParams(globalThis.location?.search).get('simd') === 'baseline'
    ? 'baseline'
    : 'relaxed';

/** The build chosen now: 'relaxed' (where the browser runs it; else the baseline) or 'baseline'. */
export const simdBuild = () => chosen;

/** @param {string} build  one of SIMD_BUILDS */
export function chooseSimdBuild(build) {
  chosen = build;
}
