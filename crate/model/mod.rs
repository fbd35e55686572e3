//! The model, whatever the machine: its config ([`config`]), its weights on the host
//! ([`weights`]), the precision they are stored in ([`quant`]), what the forward pass asks of a
//! backend ([`ops`]), the one forward pass ([`forward`]) and the logits it leaves ([`logits`]).
//! Below it: `formats/`. Above it: the backends that implement [`ops::Ops`] (`cpu/`, `gpu/`).

pub mod config;
pub mod forward;
pub mod logits;
pub mod ops;
pub mod phases;
pub mod quant;
pub mod weights;

pub use config::{Activation, LlamaConfig, Recipe, Sliding};
pub use logits::Logits;
pub use quant::{Quant, QuantPlan, Stored};
pub use weights::{
    Extras, FileBytes, FileSource, HostWeights, LayerWeights, Matrix, ReadAt, Values,
};
