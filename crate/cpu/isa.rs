//! The instruction set the CPU kernels use, detected at run time natively (AVX2, AVX-512 VNNI) and
//! fixed at compile time in WebAssembly (SIMD128, and relaxed SIMD in the page's second build).

/// The instruction set the kernels use on this machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Isa {
    Scalar,
    #[cfg(target_arch = "x86_64")]
    Avx2,
    /// AVX2, with AVX-512 VNNI's `vpdpbusd` (in its 256-bit form) for the block products.
    #[cfg(target_arch = "x86_64")]
    Avx512Vnni,
    #[cfg(target_arch = "wasm32")]
    Simd128,
}

impl Isa {
    /// The best this machine runs (AVX2 with FMA and F16C: every AVX2 processor has both).
    pub fn detect() -> Isa {
        #[cfg(target_arch = "x86_64")]
        if std::is_x86_feature_detected!("avx2")
            && std::is_x86_feature_detected!("fma")
            && std::is_x86_feature_detected!("f16c")
        {
            if std::is_x86_feature_detected!("avx512vnni")
                && std::is_x86_feature_detected!("avx512vl")
                && std::is_x86_feature_detected!("avx512f")
            {
                return Isa::Avx512Vnni;
            }
            return Isa::Avx2;
        }
        #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
        return Isa::Simd128;
        #[allow(unreachable_code)]
        Isa::Scalar
    }

    /// Every set this machine can run, for tests that compare them.
    pub fn available() -> Vec<Isa> {
        match Isa::detect() {
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512Vnni => vec![Isa::Scalar, Isa::Avx2, Isa::Avx512Vnni],
            Isa::Scalar => vec![Isa::Scalar],
            best => vec![Isa::Scalar, best],
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Isa::Scalar => "scalar",
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => "AVX2",
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512Vnni => "AVX2+VNNI",
            #[cfg(all(target_arch = "wasm32", not(target_feature = "relaxed-simd")))]
            Isa::Simd128 => "SIMD128",
            // The page's second build: fused f32 multiply-adds (`simd128::mul_add`) and Q4_0
            // byte products (`simd128::relaxed`).
            #[cfg(all(target_arch = "wasm32", target_feature = "relaxed-simd"))]
            Isa::Simd128 => "SIMD128+relaxed",
        }
    }

    /// The set's name on the command line (`--cpu-kernels`).
    pub fn key(self) -> &'static str {
        match self {
            Isa::Scalar => "scalar",
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => "avx2",
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512Vnni => "vnni",
            #[cfg(target_arch = "wasm32")]
            Isa::Simd128 => "simd128",
        }
    }

    /// The set whose [`key`](Isa::key) is `name` (any case), if this machine runs it; otherwise
    /// a sentence naming the sets it does run.
    pub fn by_name(name: &str) -> Result<Isa, String> {
        let available = Isa::available();
        available
            .iter()
            .copied()
            .find(|isa| isa.key().eq_ignore_ascii_case(name))
            .ok_or_else(|| {
                let keys: Vec<&str> = available.iter().map(|isa| isa.key()).collect();
                format!(
                    "this CPU's kernels come in {}, not \"{name}\"",
                    keys.join(", ")
                )
            })
    }
}
