//! Each runnable [`Format`] tied to its type: [`with_format!`](crate::with_format), the one place where a format
//! chosen at run time becomes the type that kernels are compiled for, and what a format is.

use crate::formats::block::{BlockFormat, Format, RunFormat};

/// `$body` with `$F` the [`RunFormat`] type of `$format` (a [`Format`]): the one place where a
/// format chosen at run time becomes a type that kernels are compiled for.
#[macro_export]
macro_rules! with_format {
    ($format:expr, $F:ident => $body:expr) => {
        match $format {
            $crate::formats::block::Format::Q8_0 => {
                type $F = $crate::formats::q8_0::Q8_0;
                $body
            }
            $crate::formats::block::Format::Q4_0 => {
                type $F = $crate::formats::q4_0::Q4_0;
                $body
            }
            $crate::formats::block::Format::Q5_0 => {
                type $F = $crate::formats::q5_0::Q5_0Run;
                $body
            }
            $crate::formats::block::Format::Q6K => {
                type $F = $crate::formats::q6_k::Q6KRun;
                $body
            }
        }
    };
}

impl Format {
    /// GGUF's name for it ("Q8_0").
    pub fn name(self) -> &'static str {
        with_format!(self, F => F::NAME)
    }

    /// GGUF's type id for it.
    pub fn id(self) -> u32 {
        with_format!(self, F => F::ID)
    }

    /// Bytes of one block's values.
    pub fn payload(self) -> usize {
        with_format!(self, F => F::PAYLOAD)
    }

    /// The payload byte of a block of zeros.
    pub fn zero_byte(self) -> u8 {
        with_format!(self, F => F::ZERO_BYTE)
    }
}
