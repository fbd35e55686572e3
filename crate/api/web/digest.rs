//! SHA-256 for the page's downloads: a site's catalog pins each model part (and each model kept on
//! another host) by its sha-256, and the worker hashes the bytes as they stream into the engine,
//! a piece at a time (the browser's `crypto.subtle.digest` takes a whole buffer, and only in a
//! secure context).

use sha2::{Digest, Sha256 as Hasher};
use wasm_bindgen::prelude::*;

/// A running SHA-256: `update` with each piece, then `hex`.
#[wasm_bindgen]
#[derive(Default)]
pub struct Sha256(Hasher);

#[wasm_bindgen]
impl Sha256 {
    #[wasm_bindgen(constructor)]
    pub fn new() -> Sha256 {
        Sha256::default()
    }

    pub fn update(&mut self, piece: &[u8]) {
        self.0.update(piece);
    }

    /// The digest of everything given so far, as 64 lowercase hex digits; the hasher starts over.
    pub fn hex(&mut self) -> String {
        self.0
            .finalize_reset()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }
}
