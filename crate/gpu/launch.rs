//! The wgpu backend's own kernels, in CubeCL (burn's kernel language): RMSNorm, RoPE, the KV
//! cache's store, SwiGLU or GEGLU and attention, each one dispatch where burn's tensor operations
//! take 2 to 12, and every projection (`linear_*`: f32, and Q8_0 / Q4_0 blocks read as they are
//! stored, with their blocks' offsets and a residual added in the same dispatch).
//!
//! Why: on a GPU every dispatch costs several microseconds of encoding, validation and idle time
//! whatever its size, and for the small models the page offers that, not arithmetic, bounds a
//! decode step. Counted in the page's worker on stories260K (5 layers, SwiftShader), wrapping
//! `GPUComputePassEncoder.dispatchWorkgroups`: 65 dispatches a layer per decode token with burn's
//! operations (RMSNorm 7, RoPE 10 for each of q and k, attention 14, SwiGLU 5, ...).
//!
//! The projections are ours, not burn's `matmul`, for two reasons. Size: burn's matmul on wgpu is
//! cubek's, dozens of tiled variants chosen at run time, and leaving it out of the page's wasm took
//! it from 2,816 to 2,398 kB gzipped (measured with `make pkg`). And bytes: the quantized ones read
//! the same Q8_0 / Q4_0 blocks as the CPU kernels (one format for both backends), 8.5 or 4.5 bits
//! a weight, dequantized in registers.
//!
//! The kernels reach burn's tensors through a backend extension ([`FusedOps`]), implemented for
//! burn's CubeCL backend; `gpu/ops.rs` calls the wrappers at the bottom; the kernels themselves are
//! in `kernels.rs`. They compute what `cpu/ops.rs` computes on the CPU, in the same order where it matters (RMSNorm, the softmax's
//! maximum), and reductions use shared memory, not subgroup operations, which not every WebGPU
//! adapter has.

use burn::backend::tensor::{FloatTensor, IntTensor};
use burn::backend::{Dispatch, backend_extension};
use burn::tensor::{DType, Shape, Tensor as BurnTensor};
use burn_cubecl::CubeBackend;
use burn_cubecl::kernel::into_contiguous;
use burn_cubecl::ops::numeric::empty_device_dtype;
use burn_cubecl::tensor::CubeTensor;
use cubecl::prelude::*;

use crate::gpu::kernels::*;

/// Units (threads) per cube (workgroup) of the row kernels; the reductions assume a power of two.
const UNITS: u32 = 64;
/// Attention scores held in shared memory at once (8 KiB of WebGPU's guaranteed 16 KiB); longer
/// contexts go in chunks of this many keys, with the softmax rescaled between chunks.
const KEY_CHUNK: usize = 2048;

/// The fused operations, on any backend's primitives; implemented for burn's CubeCL backend.
#[backend_extension(Cube)]
pub trait FusedOps: burn::backend::Backend {
    /// `x * weight / sqrt(mean(x^2) + eps)` for each row of `x` `[t, dim]`.
    fn fused_rms_norm(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        eps: f32,
    ) -> FloatTensor<Self>;

    /// Rotate adjacent pairs of every head of `q` and `k` `[t, heads * head_size]` (their own
    /// number of heads each) by each row's angles, `cos` and `sin` `[t, head_size / 2]`.
    fn fused_rope(
        q: FloatTensor<Self>,
        k: FloatTensor<Self>,
        cos: FloatTensor<Self>,
        sin: FloatTensor<Self>,
        head_size: usize,
    ) -> (FloatTensor<Self>, FloatTensor<Self>);

    /// `x` `[m, k]` times an f32 `w` `[k, n]`: `[m, n]`; with `with_residual`, plus `residual`
    /// `[m, n]` (not read without).
    fn linear_f32(
        x: FloatTensor<Self>,
        w: FloatTensor<Self>,
        residual: FloatTensor<Self>,
        with_residual: bool,
    ) -> FloatTensor<Self>;

    /// `x` `[m, k]` times `[k, n]` in blocks of 32 along `k` with one scale each, `scales`
    /// `[k / 32, n]`, and `bits` 8 or 4 a value in `quants` `[k * bits / 32, n]` (u32 words):
    /// - Q8_0: 4 values a word, each `value + 128`, lowest byte first;
    /// - Q4_0: a block's 16 bytes in 4 words, byte `j` holding value `j` (low nibble) and `j + 16`
    ///   (high), each `value + 8`.
    ///
    /// With `with_offsets`, plus each block's offset `[k / 32, n]` times the sum of the block's
    /// values of `x` (Q4_1, Q5_1, Q4_K, Q5_K); without, `offsets` is not read. `residual` as for
    /// [`linear_f32`](FusedOps::linear_f32).
    #[allow(clippy::too_many_arguments)]
    fn linear_blocks(
        x: FloatTensor<Self>,
        quants: IntTensor<Self>,
        scales: FloatTensor<Self>,
        offsets: FloatTensor<Self>,
        residual: FloatTensor<Self>,
        n: usize,
        bits: usize,
        with_offsets: bool,
        with_residual: bool,
    ) -> FloatTensor<Self>;

    /// Store `k` and `v` `[t, n_kv_heads * head_size]` at positions `start..start + t` of the
    /// caches `keys` and `values` `[n_kv_heads, capacity, head_size]`, in place (one dispatch for
    /// both); returns the caches.
    fn fused_store(
        k: FloatTensor<Self>,
        v: FloatTensor<Self>,
        keys: FloatTensor<Self>,
        values: FloatTensor<Self>,
        start: usize,
    ) -> (FloatTensor<Self>, FloatTensor<Self>);

    /// `silu(gate) * up`, or with `gelu` `gelu(gate) * up` (tanh form), element by element.
    fn fused_gated(gate: FloatTensor<Self>, up: FloatTensor<Self>, gelu: bool)
    -> FloatTensor<Self>;

    /// Causal attention of `q`'s rows `row0..row0 + t` (`q` `[rows, n_heads * head_size]`, the
    /// rows at positions `start..start + t`) over the cache's `keys` and `values` `[n_kv_heads,
    /// capacity, head_size]`, filled up to `start + t`; with a `window`, each row sees only that
    /// many positions, its own the last. Written into the same rows of `out` (`q`'s shape), in
    /// place: a batch's sequences each attend in their own dispatch into one output. Returns
    /// `out`.
    #[allow(clippy::too_many_arguments)]
    fn fused_attention(
        q: FloatTensor<Self>,
        keys: FloatTensor<Self>,
        values: FloatTensor<Self>,
        out: FloatTensor<Self>,
        row0: usize,
        t: usize,
        start: usize,
        n_heads: usize,
        window: Option<usize>,
    ) -> FloatTensor<Self>;
}

/// An uninitialized f32 tensor like `like`, of `shape`.
fn empty_f32(like: &CubeTensor, shape: Shape) -> CubeTensor {
    empty_device_dtype(like.client.clone(), like.device.clone(), shape, DType::F32)
}

/// Cubes of [`UNITS`] units for `n` elements, one unit each (spread over a second dimension when
/// there are more than a dimension takes, 65,535 on WebGPU).
fn elementwise(like: &CubeTensor, n: usize) -> CubeCount {
    cubecl::calculate_cube_count_elemwise(&like.client, n, CubeDim::new_1d(UNITS))
}

/// At least `rows` cubes, one per row, spread over two dimensions like [`elementwise`]. There may
/// be more: the kernels run the spare cubes on their last row and let them write nothing, so that
/// every unit of a cube reaches the same barriers.
fn row_cubes(like: &CubeTensor, rows: usize) -> CubeCount {
    elementwise(like, rows * UNITS as usize)
}

/// Rows of `x` one unit of a projection takes: 1 in decode (one row per sequence, often one), 8
/// in prefill, where each weight read then serves 8 tokens.
const PREFILL_TILE: usize = 8;
/// Output columns one unit of a projection takes in prefill, so that each value of `x` it reads
/// serves 4 columns (1 in decode, where that would leave a GPU 4 times fewer threads).
const PREFILL_SPAN: usize = 4;
/// A projection's cube: `LINEAR_COLS` output columns by `LINEAR_SLICES` slices of the inner
/// dimension, 64 units, the slices summed through shared memory (one barrier). Measured on
/// SwiftShader (the page, stories260K, decode tok/s): 16 x 1 60, 16 x 4 49, burn's matmul 38. One
/// slice suits a software renderer, which runs a cube's units in turn, but leaves a real GPU one
/// thread per output column (288 for stories15M), so 4.
const LINEAR_COLS: usize = 16;
const LINEAR_SLICES: usize = 4;

/// A projection's sizes: `k` inputs, `tile` rows of `x` and `span` columns per unit.
struct LinearShape {
    k: usize,
    tile: usize,
    span: usize,
}

/// The output `[m, n]` of a projection of `x`, its cubes and sizes.
fn linear_out(x: &CubeTensor, n: usize) -> (CubeTensor, CubeCount, LinearShape) {
    let [m, k] = [x.meta.shape()[0], x.meta.shape()[1]];
    let (tile, span) = if m == 1 {
        (1, 1)
    } else {
        (PREFILL_TILE, PREFILL_SPAN)
    };
    let out = empty_f32(x, Shape::new([m, n]));
    let cubes = row_cubes(x, n.div_ceil(LINEAR_COLS * span) * m.div_ceil(tile));
    let shape = LinearShape { k, tile, span };
    (out, cubes, shape)
}

/// A projection's cube dimensions.
fn linear_dim() -> CubeDim {
    CubeDim::new_2d(LINEAR_COLS as u32, LINEAR_SLICES as u32)
}

impl FusedOps for CubeBackend {
    fn fused_rms_norm(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        eps: f32,
    ) -> FloatTensor<Self> {
        let (x, weight) = (into_contiguous(x), into_contiguous(weight));
        let [t, dim] = [x.meta.shape()[0], x.meta.shape()[1]];
        let out = empty_f32(&x, Shape::new([t, dim]));
        rms_norm_kernel::launch(
            &x.client.clone(),
            row_cubes(&x, t),
            CubeDim::new_1d(UNITS),
            x.into_tensor_arg(),
            weight.into_tensor_arg(),
            out.clone().into_tensor_arg(),
            t as u32,
            eps,
            dim as f32,
            dim,
            UNITS as usize,
        );
        out
    }

    fn fused_rope(
        q: FloatTensor<Self>,
        k: FloatTensor<Self>,
        cos: FloatTensor<Self>,
        sin: FloatTensor<Self>,
        head_size: usize,
    ) -> (FloatTensor<Self>, FloatTensor<Self>) {
        let (q, k, cos, sin) = (
            into_contiguous(q),
            into_contiguous(k),
            into_contiguous(cos),
            into_contiguous(sin),
        );
        let [t, q_width] = [q.meta.shape()[0], q.meta.shape()[1]];
        let k_width = k.meta.shape()[1];
        let (q_out, k_out) = (
            empty_f32(&q, Shape::new([t, q_width])),
            empty_f32(&k, Shape::new([t, k_width])),
        );
        let (q_pairs, k_pairs) = (t * q_width / 2, t * k_width / 2);
        rope_kernel::launch(
            &q.client.clone(),
            elementwise(&q, q_pairs + k_pairs),
            CubeDim::new_1d(UNITS),
            q.into_tensor_arg(),
            k.into_tensor_arg(),
            cos.into_tensor_arg(),
            sin.into_tensor_arg(),
            q_out.clone().into_tensor_arg(),
            k_out.clone().into_tensor_arg(),
            q_pairs as u32,
            k_pairs as u32,
            q_width,
            k_width,
            head_size / 2,
        );
        (q_out, k_out)
    }

    fn linear_f32(
        x: FloatTensor<Self>,
        w: FloatTensor<Self>,
        residual: FloatTensor<Self>,
        with_residual: bool,
    ) -> FloatTensor<Self> {
        let n = w.meta.shape()[1];
        let (x, w, residual) = (
            into_contiguous(x),
            into_contiguous(w),
            into_contiguous(residual),
        );
        let (out, cubes, shape) = linear_out(&x, n);
        // SAFETY: every index is in bounds: columns and rows are clamped to the last valid one
        // (`linear_unit`, `x_at`), the inner loop stops at `k`, and only valid units write.
        unsafe {
            linear_f32_kernel::launch_unchecked(
                &x.client.clone(),
                cubes,
                linear_dim(),
                x.into_tensor_arg(),
                w.into_tensor_arg(),
                residual.into_tensor_arg(),
                out.clone().into_tensor_arg(),
                shape.k,
                shape.tile,
                LINEAR_COLS,
                LINEAR_SLICES,
                shape.span,
                with_residual,
            );
        }
        out
    }

    fn linear_blocks(
        x: FloatTensor<Self>,
        quants: IntTensor<Self>,
        scales: FloatTensor<Self>,
        offsets: FloatTensor<Self>,
        residual: FloatTensor<Self>,
        n: usize,
        bits: usize,
        with_offsets: bool,
        with_residual: bool,
    ) -> FloatTensor<Self> {
        let (x, residual) = (into_contiguous(x), into_contiguous(residual));
        let (out, cubes, shape) = linear_out(&x, n);
        // SAFETY: every index is in bounds: columns and rows are clamped to the last valid one
        // (`linear_unit`, `x_at`), the inner loop stops at `k`, and only valid units write.
        unsafe {
            linear_blocks_kernel::launch_unchecked(
                &x.client.clone(),
                cubes,
                linear_dim(),
                x.into_tensor_arg(),
                quants.into_tensor_arg(),
                scales.into_tensor_arg(),
                offsets.into_tensor_arg(),
                residual.into_tensor_arg(),
                out.clone().into_tensor_arg(),
                shape.k,
                shape.tile,
                LINEAR_COLS,
                LINEAR_SLICES,
                shape.span,
                bits,
                with_offsets,
                with_residual,
            );
        }
        out
    }

    fn fused_store(
        k: FloatTensor<Self>,
        v: FloatTensor<Self>,
        keys: FloatTensor<Self>,
        values: FloatTensor<Self>,
        start: usize,
    ) -> (FloatTensor<Self>, FloatTensor<Self>) {
        let (k, v) = (into_contiguous(k), into_contiguous(v));
        let [t, width] = [k.meta.shape()[0], k.meta.shape()[1]];
        let [capacity, head_size] = [keys.meta.shape()[1], keys.meta.shape()[2]];
        assert!(
            keys.is_contiguous() && values.is_contiguous() && start + t <= capacity,
            "the caches hold positions 0..{capacity} contiguously"
        );
        let n = t * width;
        store_kernel::launch(
            &k.client.clone(),
            elementwise(&k, n),
            CubeDim::new_1d(UNITS),
            k.into_tensor_arg(),
            v.into_tensor_arg(),
            keys.clone().into_tensor_arg(),
            values.clone().into_tensor_arg(),
            n as u32,
            start as u32,
            capacity as u32,
            width,
            head_size,
        );
        (keys, values)
    }

    fn fused_gated(
        gate: FloatTensor<Self>,
        up: FloatTensor<Self>,
        gelu: bool,
    ) -> FloatTensor<Self> {
        let (gate, up) = (into_contiguous(gate), into_contiguous(up));
        let shape = gate.meta.shape().clone();
        let n = shape.num_elements();
        let out = empty_f32(&gate, shape);
        gated_kernel::launch(
            &gate.client.clone(),
            elementwise(&gate, n),
            CubeDim::new_1d(UNITS),
            gate.into_tensor_arg(),
            up.into_tensor_arg(),
            out.clone().into_tensor_arg(),
            n as u32,
            gelu,
        );
        out
    }

    fn fused_attention(
        q: FloatTensor<Self>,
        keys: FloatTensor<Self>,
        values: FloatTensor<Self>,
        out: FloatTensor<Self>,
        row0: usize,
        t: usize,
        start: usize,
        n_heads: usize,
        window: Option<usize>,
    ) -> FloatTensor<Self> {
        let (q, keys, values) = (
            into_contiguous(q),
            into_contiguous(keys),
            into_contiguous(values),
        );
        assert!(
            out.is_contiguous()
                && out.meta.shape() == q.meta.shape()
                && row0 + t <= q.meta.shape()[0],
            "attention writes rows {row0}..{} of an output shaped as q",
            row0 + t
        );
        let [n_kv, capacity, head_size] = [
            keys.meta.shape()[0],
            keys.meta.shape()[1],
            keys.meta.shape()[2],
        ];
        attention_kernel::launch(
            &q.client.clone(),
            row_cubes(&q, t * n_heads),
            CubeDim::new_1d(UNITS),
            q.into_tensor_arg(),
            keys.into_tensor_arg(),
            values.into_tensor_arg(),
            out.clone().into_tensor_arg(),
            (t * n_heads) as u32,
            row0 as u32,
            start as u32,
            window.unwrap_or(0) as u32,
            capacity as u32,
            1.0 / (head_size as f32).sqrt(),
            n_heads,
            n_heads / n_kv,
            head_size,
            KEY_CHUNK,
            UNITS as usize,
        );
        out
    }
}

/// Tensors made on one device from host values, their bytes as they are. burn's
/// `Tensor::from_data` passes every upload through `TensorData::convert_dtype`, which links a cast
/// between every pair of element types whatever the upload's type: 120 kB of the page's wasm
/// (`try_cast_clone` and `try_cast_inplace`, measured with twiggy on 2026-11-27).
pub(crate) struct Uploads {
    client: cubecl::client::Client,
    device: burn_cubecl::CubeDevice,
}

impl Uploads {
    /// The device's compute client, taken from an empty tensor: the wgpu backend's tensors are
    /// CubeCL's.
    pub(crate) fn new(device: &burn::tensor::Device) -> Self {
        let probe = BurnTensor::<1>::empty([1], device)
            .try_into_primitive::<CubeBackend>()
            .expect("the wgpu backend's tensors are CubeCL tensors");
        Self {
            client: probe.client,
            device: probe.device,
        }
    }

    fn tensor(&self, bytes: &[u8], shape: &[usize], dtype: DType) -> CubeTensor {
        let handle = self.client.create_from_slice(bytes);
        CubeTensor::new_contiguous(
            self.client.clone(),
            self.device.clone(),
            Shape::from(shape.to_vec()),
            handle,
            dtype,
        )
    }

    /// `values` as an f32 tensor of `shape`.
    pub(crate) fn floats<const D: usize>(
        &self,
        values: &[f32],
        shape: [usize; D],
    ) -> BurnTensor<D> {
        let tensor = self.tensor(bytemuck::cast_slice(values), &shape, DType::F32);
        BurnTensor::from_primitive::<CubeBackend>(tensor)
    }

    /// `values` as a u32 vector.
    pub(crate) fn words(&self, values: &[u32]) -> BurnTensor<1, burn::tensor::Int> {
        let tensor = self.tensor(bytemuck::cast_slice(values), &[values.len()], DType::U32);
        BurnTensor::from_primitive::<CubeBackend>(tensor)
    }
}

/// `a + b` (`b` may be one row, broadcast over `a`'s), the backend's float add called directly:
/// the tensor API's `+` also takes quantized tensors, and so links burn's quantization kernels
/// (with `Tensor::cat`'s, below: 87 kB of the page's wasm, twiggy, 2026-11-27).
pub(crate) fn add(a: BurnTensor<2>, b: BurnTensor<2>) -> BurnTensor<2> {
    use burn::backend::ops::FloatTensorOps;
    BurnTensor::from_dispatch(<Dispatch as FloatTensorOps<Dispatch>>::float_add(
        a.into_dispatch(),
        b.into_dispatch(),
    ))
}

/// `x`'s elements in `ranges`, the backend's float slice called directly (see [`add`]).
pub(crate) fn slice<const D: usize>(
    x: BurnTensor<D>,
    ranges: [std::ops::Range<usize>; D],
) -> BurnTensor<D> {
    use burn::backend::ops::FloatTensorOps;
    let slices = ranges.map(burn::tensor::Slice::from);
    BurnTensor::from_dispatch(<Dispatch as FloatTensorOps<Dispatch>>::float_slice(
        x.into_dispatch(),
        &slices,
    ))
}

/// `x` with `value` in `ranges`, the backend's float slice assignment called directly (see
/// [`add`]).
pub(crate) fn slice_assign<const D: usize>(
    x: BurnTensor<D>,
    ranges: [std::ops::Range<usize>; D],
    value: BurnTensor<D>,
) -> BurnTensor<D> {
    use burn::backend::ops::FloatTensorOps;
    let slices = ranges.map(burn::tensor::Slice::from);
    BurnTensor::from_dispatch(<Dispatch as FloatTensorOps<Dispatch>>::float_slice_assign(
        x.into_dispatch(),
        &slices,
        value.into_dispatch(),
    ))
}

/// `parts` side by side along `dim` (0: rows, 1: columns), each assigned into its place in one
/// empty tensor (as burn's own `cat` does for float tensors); burn's `Tensor::cat` also takes
/// quantized tensors (see [`add`]).
pub(crate) fn concat(parts: Vec<BurnTensor<2>>, dim: usize) -> BurnTensor<2> {
    let mut shape = parts[0].dims();
    shape[dim] = parts.iter().map(|p| p.dims()[dim]).sum();
    let mut out = BurnTensor::<2>::empty(shape, &parts[0].device());
    let mut at = 0;
    for part in parts {
        let [rows, cols] = part.dims();
        let (r, c) = if dim == 0 {
            (at..at + rows, 0..cols)
        } else {
            (0..rows, at..at + cols)
        };
        at += if dim == 0 { rows } else { cols };
        out = slice_assign(out, [r, c], part);
    }
    out
}

/// [`FusedOps::fused_rms_norm`] on tensors.
pub(crate) fn rms_norm(x: BurnTensor<2>, weight: BurnTensor<1>, eps: f32) -> BurnTensor<2> {
    BurnTensor::from_dispatch(<Dispatch as FusedOps>::fused_rms_norm(
        x.into_dispatch(),
        weight.into_dispatch(),
        eps,
    ))
}

/// [`FusedOps::fused_rope`] on tensors.
pub(crate) fn rope(
    q: BurnTensor<2>,
    k: BurnTensor<2>,
    cos: BurnTensor<2>,
    sin: BurnTensor<2>,
    head_size: usize,
) -> (BurnTensor<2>, BurnTensor<2>) {
    let (q, k) = <Dispatch as FusedOps>::fused_rope(
        q.into_dispatch(),
        k.into_dispatch(),
        cos.into_dispatch(),
        sin.into_dispatch(),
        head_size,
    );
    (BurnTensor::from_dispatch(q), BurnTensor::from_dispatch(k))
}

/// [`FusedOps::fused_store`] on tensors: `k` and `v` `[t, n_kv_heads * head_size]` written into
/// `keys` and `values` at positions `start..`.
pub(crate) fn store(
    k: BurnTensor<2>,
    v: BurnTensor<2>,
    keys: BurnTensor<3>,
    values: BurnTensor<3>,
    start: usize,
) -> (BurnTensor<3>, BurnTensor<3>) {
    let (keys, values) = <Dispatch as FusedOps>::fused_store(
        k.into_dispatch(),
        v.into_dispatch(),
        keys.into_dispatch(),
        values.into_dispatch(),
        start,
    );
    (
        BurnTensor::from_dispatch(keys),
        BurnTensor::from_dispatch(values),
    )
}

/// [`FusedOps::fused_gated`] on tensors.
pub(crate) fn gated(gate: BurnTensor<2>, up: BurnTensor<2>, gelu: bool) -> BurnTensor<2> {
    BurnTensor::from_dispatch(<Dispatch as FusedOps>::fused_gated(
        gate.into_dispatch(),
        up.into_dispatch(),
        gelu,
    ))
}

/// [`FusedOps::fused_attention`] on tensors: `q`'s rows `rows` (a sequence's, at positions
/// `start..`) attend over the cache, into the same rows of `out`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn attention(
    q: BurnTensor<2>,
    keys: BurnTensor<3>,
    values: BurnTensor<3>,
    out: BurnTensor<2>,
    rows: std::ops::Range<usize>,
    start: usize,
    n_heads: usize,
    window: Option<usize>,
) -> BurnTensor<2> {
    BurnTensor::from_dispatch(<Dispatch as FusedOps>::fused_attention(
        q.into_dispatch(),
        keys.into_dispatch(),
        values.into_dispatch(),
        out.into_dispatch(),
        rows.start,
        rows.len(),
        start,
        n_heads,
        window,
    ))
}

/// A projection's weights on the device, in the form its kernel reads (see [`FusedOps::linear_f32`]
/// and [`FusedOps::linear_blocks`]). A model holds a few per layer and never moves them in a loop,
/// so the variants' sizes do not matter.
#[allow(clippy::large_enum_variant)]
pub enum DeviceLinear {
    /// `[k, n]`.
    F32(BurnTensor<2>),
    /// Q8_0 (`bits` 8) or Q4_0 (`bits` 4) blocks, and the blocks' offsets `[k / 32, n]` where
    /// the stored type has them (Q4_1, Q5_1, Q4_K, Q5_K).
    Blocks {
        quants: BurnTensor<1, burn::tensor::Int>,
        scales: BurnTensor<1>,
        offsets: Option<BurnTensor<2>>,
        n: usize,
        bits: usize,
    },
    /// A projection too large for one buffer, split by output rows: their outputs side by side.
    Parts(Vec<DeviceLinear>),
}

/// `x` `[m, k]` through the projection `w`: `[m, n]`, plus `residual` `[m, n]` where there is
/// one; one dispatch (a part each for [`Parts`], with the residual added after them).
///
/// [`Parts`]: DeviceLinear::Parts
pub(crate) fn linear(
    x: BurnTensor<2>,
    w: &DeviceLinear,
    residual: Option<BurnTensor<2>>,
) -> BurnTensor<2> {
    let with_residual = residual.is_some();
    // Without a residual the kernels read none: `x` stands in for the argument.
    let residual_arg = || {
        residual
            .clone()
            .unwrap_or_else(|| x.clone())
            .into_dispatch()
    };
    match w {
        DeviceLinear::Parts(parts) => {
            let y = concat(
                parts.iter().map(|p| linear(x.clone(), p, None)).collect(),
                1,
            );
            match residual {
                Some(residual) => add(residual, y),
                None => y,
            }
        }
        DeviceLinear::F32(w) => BurnTensor::from_dispatch(<Dispatch as FusedOps>::linear_f32(
            x.clone().into_dispatch(),
            w.clone().into_dispatch(),
            residual_arg(),
            with_residual,
        )),
        DeviceLinear::Blocks {
            quants,
            scales,
            offsets,
            n,
            bits,
        } => BurnTensor::from_dispatch(<Dispatch as FusedOps>::linear_blocks(
            x.clone().into_dispatch(),
            quants.clone().into_dispatch(),
            scales.clone().into_dispatch(),
            // Without offsets the kernel reads none: the scales stand in for the argument.
            offsets.as_ref().map_or_else(
                || scales.clone().into_dispatch(),
                |o| o.clone().into_dispatch(),
            ),
            residual_arg(),
            *n,
            *bits,
            offsets.is_some(),
            with_residual,
        )),
    }
}
