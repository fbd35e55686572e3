//! `crate/model/` without the forward pass and its logits (which use burn), by path.

#[path = "../../../crate/model/config.rs"]
pub mod config;
#[path = "../../../crate/model/quant.rs"]
pub mod quant;
#[path = "../../../crate/model/weights.rs"]
pub mod weights;

pub use config::{Activation, LlamaConfig, Recipe, Sliding};
pub use quant::{Quant, QuantPlan, Stored};
pub use weights::{
    Extras, FileBytes, FileSource, HostWeights, LayerWeights, Matrix, ReadAt, Values,
};
