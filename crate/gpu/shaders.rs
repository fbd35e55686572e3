//! The step's kernels (`shaders/*.wgsl`): their source with the model's shape written in as
//! constants, which burn launches (`launch.rs`); CubeCL compiles each once per device, and two
//! models of one shape share them. Every binding is a storage buffer (read-only where the kernel
//! only reads it), bound in the order the kernel declares them.

use crate::gpu::launch::Kernel;
use crate::model::{Activation, LlamaConfig};

/// Sequences one pass may hold (the pass's uniform has a place for each).
pub const MAX_SPANS: usize = 256;
/// Rows one pass may hold: the attention kernel keeps a norm for each of a span's rows.
pub const MAX_PASS_ROWS: usize = 1024;

/// Units of a kernel's workgroup (`WG` in `common.wgsl`).
const WORKGROUP: usize = 256;
const WG: u32 = WORKGROUP as u32;

/// Whether the kernels take `c`'s shape: a head's dimensions are spread over a workgroup's units
/// and read four at a time, so a head size is a power of two from 4 to 256 (every model the
/// project runs: 8 for stories260K, 64 for SmolLM2, 128 for Qwen, 256 for Gemma 3).
pub fn supports(c: &LlamaConfig) -> crate::Result<()> {
    let hs = c.head_size();
    if !(4..=WORKGROUP).contains(&hs) || !hs.is_power_of_two() {
        return Err(crate::Error::Unsupported(format!(
            "the GPU kernels take heads of 4 to 256 dimensions, a power of two, and this model's \
             have {hs}: choose the CPU backend"
        )));
    }
    Ok(())
}

const COMMON: &str = include_str!("shaders/common.wgsl");

/// Every kernel of a step.
pub struct Kernels {
    /// Norm, q/k/v, RoPE, the KV store and attention: `attention.wgsl`.
    pub attention: Kernel,
    /// `wo` and the residual: `project.wgsl`.
    pub project_out: Kernel,
    /// Norm, gate and up, the activation: `feed_forward.wgsl`.
    pub feed_forward: Kernel,
    /// `w2` and the residual: `project.wgsl`.
    pub project_down: Kernel,
    /// The final norm and the classifier: `classify.wgsl`.
    pub classify: Kernel,
    /// The greedy pick: `pick.wgsl`.
    pub pick: Kernel,
    /// A KV pool's slots copied into a larger pool: `grow.wgsl`.
    pub grow: Kernel,
}

/// The model's shape as WGSL constants.
fn header(c: &LlamaConfig) -> String {
    let hs = c.head_size();
    let constants = [
        ("DIM", c.dim),
        ("Q_DIM", c.q_dim()),
        ("KV_DIM", c.kv_dim()),
        ("HIDDEN", c.hidden_dim),
        ("N_HEADS", c.n_heads),
        ("N_KV", c.n_kv_heads),
        ("HS", hs),
        ("VOCAB", c.vocab_size),
        ("MAX_SPANS", MAX_SPANS),
        ("MAX_PASS_ROWS", MAX_PASS_ROWS),
    ];
    let mut s: String = constants
        .iter()
        .map(|(name, v)| format!("const {name}: u32 = {v}u;\n"))
        .collect();
    let flags = [
        ("QKV_BIAS", c.recipe.qkv_bias),
        ("QK_NORM", c.recipe.qk_norm),
        ("POST_NORMS", c.recipe.post_norms),
        ("GELU", c.recipe.activation == Activation::GeluTanh),
    ];
    for (name, on) in flags {
        s += &format!("const {name}: bool = {on};\n");
    }
    // Below every finite score: f32's lowest, rounded inward (Chromium's WGSL compiler refuses
    // -3.4028235e38, which as written is past f32's range).
    s += "const LOWEST: f32 = -3.4028e38;\n";
    s += &format!("const EPS: f32 = {:?};\n", c.norm_eps);
    s += &format!("const SCALE: f32 = {:?};\n", 1.0 / (hs as f32).sqrt());
    s
}

impl Kernels {
    /// The kernels for a model of `config`'s shape (CubeCL compiles each on its first launch).
    pub fn new(config: &LlamaConfig) -> Kernels {
        let header = header(config);
        let with_common = |kernel: &str| Kernel::new(format!("{header}{COMMON}{kernel}"), WG);
        let project = |mat: u32, input: &str, post: u32| {
            with_common(&format!(
                "const MAT: u32 = {mat}u;\nconst IN: u32 = {input};\nconst POST: u32 = {post}u;\n{}",
                include_str!("shaders/project.wgsl")
            ))
        };
        Kernels {
            attention: with_common(include_str!("shaders/attention.wgsl")),
            project_out: project(3, "Q_DIM", 7),
            feed_forward: with_common(include_str!("shaders/feed_forward.wgsl")),
            project_down: project(5, "HIDDEN", 8),
            classify: with_common(include_str!("shaders/classify.wgsl")),
            pick: Kernel::new(format!("{header}{}", include_str!("shaders/pick.wgsl")), WG),
            grow: Kernel::new(include_str!("shaders/grow.wgsl").into(), WG),
        }
    }
}
