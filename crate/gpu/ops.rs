//! The forward pass's operations on burn tensors, for the wgpu backend (native Vulkan/Metal and
//! browser WebGPU). Projections hold f32 or the Q8_0 / Q4_0 blocks the CPU kernels read
//! (`model/quant.rs` makes them, for both backends), transposed to column-major on upload (`[in, out]`, or words and
//! scales by column) so that neighbouring GPU units read neighbouring words. The projections
//! (with their blocks' offsets, and a residual where `matmul_add` asks), RMSNorm, RoPE of q and k,
//! the KV store, attention and SwiGLU (or GEGLU) are tokenometer's own kernels (`gpu/kernels.rs`),
//! one dispatch each: 13 a layer in a decode step, and 2 more for each further sequence of a batch.

use std::ops::Range;

use burn::prelude::*;

use crate::formats::{Blocks, Format};
use crate::gpu::launch::{self as gpu_kernels, DeviceLinear, Uploads};
use crate::model::ops::{Heads, Ops, Span};
use crate::model::{Logits, Matrix, QuantPlan, Stored};

/// The most bytes one projection's buffer holds; larger ones are split by rows.
const PART_BYTES: usize = 64 << 20;

pub struct DeviceOps {
    heads: Heads,
    device: Device,
    uploads: Uploads,
}

impl DeviceOps {
    pub fn new(heads: Heads, device: Device) -> Self {
        let uploads = Uploads::new(&device);
        Self {
            heads,
            device,
            uploads,
        }
    }

    /// The `n` rows' bytes as little-endian u32 words, each XORed with `flip`, transposed to
    /// `[words a row, n]` so that the kernel's units, one per row, read adjacent words.
    fn words(&self, bytes: &[u8], n: usize, flip: u32) -> Tensor<1, Int> {
        let words: Vec<u32> = bytes
            .chunks_exact(4)
            .map(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]]) ^ flip)
            .collect();
        self.uploads.words(&transpose(&words, n))
    }

    /// One projection's weights `[n, cols]` as stored, on the device.
    fn upload(&self, stored: Stored, cols: usize) -> DeviceLinear {
        let n = stored.len() / cols;
        let Blocks {
            format,
            quants,
            scales,
            offsets,
            ..
        } = match stored {
            Stored::F32(values) => {
                let values = transpose(&values, n);
                return DeviceLinear::F32(self.uploads.floats(&values, [cols, n]));
            }
            Stored::Blocks(blocks) => blocks,
        };
        let (bits, flip) = match format {
            // Each i8 biased to 0..=255 (its top bit flipped), so that the kernel reads a byte
            // without sign extension.
            Format::Q8_0 => (8, 0x8080_8080),
            Format::Q4_0 => (4, 0),
            Format::Q5_0 | Format::Q6K => unreachable!("widened in `linear`"),
        };
        // Offsets `[blocks a row, n]`, the `k` of an f32 projection of the activations' block sums.
        let offsets = (!offsets.is_empty()).then(|| {
            let shape = [offsets.len() / n, n];
            self.uploads.floats(&transpose(&offsets, n), shape)
        });
        DeviceLinear::Blocks {
            quants: self.words(&quants, n, flip),
            scales: self.scales(&scales, n),
            offsets,
            n,
            bits,
        }
    }

    /// The `n` rows' block scales, transposed to `[blocks a row, n]`.
    fn scales(&self, scales: &[f32], n: usize) -> Tensor<1> {
        self.vector(&transpose(scales, n))
    }
}

/// RoPE's angles `[t, head_size / 2]` for every row, and the spans.
pub struct DevicePass {
    spans: Vec<Span>,
    cos: Tensor<2>,
    sin: Tensor<2>,
}

/// Per layer, keys and values `[n_kv_heads, capacity, head_size]`.
pub struct DeviceCache {
    keys: Vec<Tensor<3>>,
    values: Vec<Tensor<3>>,
}

/// `rows` rows of equal length, as columns: `[rows, len] -> [len, rows]`.
fn transpose<T: Copy + Default>(values: &[T], rows: usize) -> Vec<T> {
    let len = values.len() / rows;
    let mut out = vec![T::default(); values.len()];
    for (r, row) in values.chunks_exact(len).enumerate() {
        for (c, &v) in row.iter().enumerate() {
            out[c * rows + r] = v;
        }
    }
    out
}

impl Ops for DeviceOps {
    type Act = Tensor<2>;
    type Vector = Tensor<1>;
    type Linear = DeviceLinear;
    type Pass = DevicePass;
    type Cache = DeviceCache;

    fn vector(&self, v: &[f32]) -> Tensor<1> {
        self.uploads.floats(v, [v.len()])
    }

    fn linear_row(&self, _: &DeviceLinear, _: usize, _: &mut Vec<f32>) -> bool {
        false
    }

    fn linear(&self, name: &str, m: Matrix, plan: &mut QuantPlan) -> DeviceLinear {
        let (n, cols) = (m.rows, m.cols);
        let stored = match plan.apply(name, m) {
            // The GPU kernels read blocks of one scale and bytes or nibbles: Q6_K's (two scales a
            // block) are widened here, before the parts are sized, and counted as the f32 they
            // are on the device.
            Stored::Blocks(blocks) if blocks.format == Format::Q6K => {
                let values = blocks.dequantize();
                plan.device_bytes += 4 * values.len() as u64 - blocks.bytes();
                Stored::F32(values.into())
            }
            // Q5_0's codes (and Q5_1's and Q5_K's) are read as Q8_0's bytes: exactly, 9 bits a
            // value where the CPU keeps 6.
            Stored::Blocks(blocks) if blocks.format == Format::Q5_0 => {
                let bytes = blocks.to_q8_0();
                plan.device_bytes += bytes.bytes() - blocks.bytes();
                Stored::Blocks(bytes)
            }
            stored => stored,
        };
        // One buffer per part of at most PART_BYTES: Gemma 3's classifier (262,144 x 640 Q8_0,
        // 160 MiB of codes) is past what a device lends one buffer by default (WebGPU: 128 MiB
        // bound, 256 MiB in all); llvmpipe refused it.
        let parts = (stored.bytes() as usize).div_ceil(PART_BYTES).max(1);
        if parts > 1 {
            let rows = n.div_ceil(parts);
            return DeviceLinear::Parts(
                (0..n)
                    .step_by(rows)
                    .map(|r| self.upload(stored.rows(r..(r + rows).min(n), cols), cols))
                    .collect(),
            );
        }
        self.upload(stored, cols)
    }

    fn new_cache(&self, layers: usize) -> DeviceCache {
        let empty = || Tensor::<3>::empty([0, 0, 0], &self.device);
        DeviceCache {
            keys: (0..layers).map(|_| empty()).collect(),
            values: (0..layers).map(|_| empty()).collect(),
        }
    }

    fn grow(&self, cache: &mut DeviceCache, capacity: usize, filled: usize) {
        let Heads {
            n_kv_heads: n_kv,
            head_size: hs,
            ..
        } = self.heads;
        let kept = [0..n_kv, 0..filled, 0..hs];
        for tensors in [&mut cache.keys, &mut cache.values] {
            for t in tensors.iter_mut() {
                let old = std::mem::replace(t, Tensor::empty([0, 0, 0], &self.device));
                let grown = Tensor::zeros([n_kv, capacity, hs], &self.device);
                *t = if filled == 0 {
                    grown
                } else {
                    let old = gpu_kernels::slice(old, kept.clone());
                    gpu_kernels::slice_assign(grown, kept.clone(), old)
                };
            }
        }
    }

    fn embed(&self, rows: Vec<f32>, t: usize) -> Tensor<2> {
        let dim = rows.len() / t;
        self.uploads.floats(&rows, [t, dim])
    }

    fn pass(&self, spans: &[Span], cos: Vec<f32>, sin: Vec<f32>) -> DevicePass {
        let half = self.heads.head_size / 2;
        let t = cos.len() / half;
        let angles = |v: Vec<f32>| self.uploads.floats(&v, [t, half]);
        DevicePass {
            spans: spans.to_vec(),
            cos: angles(cos),
            sin: angles(sin),
        }
    }

    fn rms_norm(&self, x: &Tensor<2>, weight: &Tensor<1>, eps: f32) -> Tensor<2> {
        gpu_kernels::rms_norm(x.clone(), weight.clone(), eps)
    }

    fn head_rms_norm(&self, x: Tensor<2>, weight: &Tensor<1>, eps: f32) -> Tensor<2> {
        let [t, width] = x.dims();
        let [hs] = weight.dims();
        let heads = x.reshape([t * width / hs, hs]);
        gpu_kernels::rms_norm(heads, weight.clone(), eps).reshape([t, width])
    }

    fn matmul(&self, x: &Tensor<2>, w: &DeviceLinear) -> Tensor<2> {
        gpu_kernels::linear(x.clone(), w, None)
    }

    fn matmul_add(&self, x: Tensor<2>, h: &Tensor<2>, w: &DeviceLinear) -> Tensor<2> {
        gpu_kernels::linear(h.clone(), w, Some(x))
    }

    fn rope(&self, q: Tensor<2>, k: Tensor<2>, pass: &DevicePass) -> (Tensor<2>, Tensor<2>) {
        gpu_kernels::rope(
            q,
            k,
            pass.cos.clone(),
            pass.sin.clone(),
            self.heads.head_size,
        )
    }

    fn attention(
        &self,
        q: Tensor<2>,
        k: Tensor<2>,
        v: Tensor<2>,
        caches: &mut [&mut DeviceCache],
        layer: usize,
        pass: &DevicePass,
        window: Option<usize>,
    ) -> Tensor<2> {
        // Each sequence stores its rows' keys and values in its own cache and attends over it,
        // into its rows of one output (two dispatches a sequence; a concatenation of the
        // sequences' outputs took one more each).
        let mut out = Tensor::empty(q.dims(), &self.device);
        let mut row = 0;
        for (span, cache) in pass.spans.iter().zip(caches.iter_mut()) {
            let rows = row..row + span.len;
            let part = |x: &Tensor<2>| {
                let [_, width] = x.dims();
                gpu_kernels::slice(x.clone(), [rows.clone(), 0..width])
            };
            self.store(part(&k), part(&v), cache, layer, span.start);
            out = gpu_kernels::attention(
                q.clone(),
                cache.keys[layer].clone(),
                cache.values[layer].clone(),
                out,
                rows,
                span.start,
                self.heads.n_heads,
                window,
            );
            row += span.len;
        }
        out
    }

    fn add(&self, x: Tensor<2>, y: Tensor<2>) -> Tensor<2> {
        gpu_kernels::add(x, y)
    }

    fn add_bias(&self, x: Tensor<2>, bias: &Tensor<1>) -> Tensor<2> {
        gpu_kernels::add(x, bias.clone().unsqueeze::<2>())
    }

    fn swiglu(&self, gate: Tensor<2>, up: Tensor<2>) -> Tensor<2> {
        gpu_kernels::gated(gate, up, false)
    }

    fn geglu(&self, gate: Tensor<2>, up: Tensor<2>) -> Tensor<2> {
        // In f32, as llama.cpp's GPU backends compute it (its CPU backend rounds through an f16
        // table, which `cpu/ops.rs` follows); one dispatch where burn's operations took 9.
        gpu_kernels::gated(gate, up, true)
    }

    fn rows(&self, x: Tensor<2>, rows: Range<usize>) -> Tensor<2> {
        let [_, width] = x.dims();
        gpu_kernels::slice(x, [rows, 0..width])
    }

    fn cat(&self, parts: Vec<Tensor<2>>) -> Tensor<2> {
        gpu_kernels::concat(parts, 0)
    }

    fn logits(&self, x: Tensor<2>) -> Logits {
        Logits::Device(Box::new(x))
    }
}

impl DeviceOps {
    /// Store one sequence's keys and values `[t, n_kv_heads * head_size]` at positions `start..`
    /// of its cache's `layer`, in place, in one dispatch (two slice_assigns before).
    fn store(
        &self,
        k: Tensor<2>,
        v: Tensor<2>,
        cache: &mut DeviceCache,
        layer: usize,
        start: usize,
    ) {
        let empty = || Tensor::empty([0, 0, 0], &self.device);
        let keys = std::mem::replace(&mut cache.keys[layer], empty());
        let values = std::mem::replace(&mut cache.values[layer], empty());
        (cache.keys[layer], cache.values[layer]) = gpu_kernels::store(k, v, keys, values, start);
    }
}
