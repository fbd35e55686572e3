//! What every architecture file fills in ([`Arch`]) and reads ([`Metadata`]).

use crate::error::Result;
use crate::model::Recipe;

/// What an architecture reads of a file's metadata (a GGUF's, `loading/gguf.rs`), in the file's
/// own key names.
pub trait Metadata {
    /// Whether the file has `key`.
    fn has(&self, key: &str) -> bool;
    /// A count, if the file has it.
    fn count(&self, key: &str) -> Result<Option<usize>>;
    /// A count the file must have.
    fn required(&self, key: &str) -> Result<usize>;
    /// A number, `default` where the file has none.
    fn float(&self, key: &str, default: f32) -> Result<f32>;
}

/// An architecture as llama.cpp names it.
pub struct Arch {
    /// `general.architecture`, and the prefix of its metadata keys.
    pub name: &'static str,
    /// What people know it by, for the list in errors.
    pub models: &'static str,
    /// Its recipe from the file's metadata.
    pub recipe: fn(&dyn Metadata) -> Result<Recipe>,
    /// RMSNorm's epsilon where a file does not say (`{arch}.attention.layer_norm_rms_epsilon`).
    pub default_eps: f32,
}
