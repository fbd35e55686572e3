//! Model files in the formats we read, from bytes (the browser hands over fetched buffers) or paths.

pub mod arch;
pub mod chat;
pub mod gguf;
pub mod gguf_stream;
pub mod gguf_writer;
pub mod hf;
pub mod llama2c;
pub mod spm;
pub mod synth;
pub mod tokenizer;
mod tokenizer_json;

#[cfg(not(target_arch = "wasm32"))]
use crate::error::Error;
use crate::error::Result;
use crate::loading::tokenizer::Tokenizer;
use std::sync::Arc;

use crate::model::{FileBytes, FileSource, HostWeights};

/// The bytes of a model in one of the supported formats.
pub struct ModelFiles {
    /// A short name for the conditions line ("stories260K").
    pub name: String,
    pub format: ModelFormat,
    /// A GGUF's header, parsed once for both the tokenizer inside and the weights.
    gguf_header: std::cell::OnceCell<gguf::Gguf>,
}

pub enum ModelFormat {
    /// A GGUF file of an architecture `loading/arch/` names (llama, gemma3, qwen2, qwen3), its
    /// tokenizer usually inside; in memory, or outside it (the page's download).
    Gguf(FileSource),
    /// A GGUF made as it streamed in ([`gguf_stream::GgufStream`]): its header and tensors.
    Streamed(Box<gguf_stream::Streamed>),
    /// A llama2.c version-0 `.bin`.
    Llama2c(Arc<FileBytes>),
    /// Hugging Face `config.json` + `model.safetensors`.
    HuggingFace {
        config_json: Vec<u8>,
        safetensors: Arc<FileBytes>,
    },
}

/// The header of a GGUF held outside memory, parsed from its first bytes: 1 MiB, then twice as
/// many until the header fits (a 262k-token vocabulary takes about 7 MB) or the file is read
/// whole, when the parser's error is the file's own.
fn outside_header(source: &FileSource) -> Result<gguf::Gguf> {
    let mut prefix = (1 << 20).min(source.len());
    loop {
        match gguf::Gguf::parse_start(&source.range(0, prefix), source.len())? {
            None => prefix = (2 * prefix).min(source.len()),
            Some(header) => return Ok(header),
        }
    }
}

impl ModelFiles {
    pub fn llama2c(name: impl Into<String>, bytes: impl Into<FileBytes>) -> Self {
        Self {
            name: name.into(),
            gguf_header: Default::default(),
            format: ModelFormat::Llama2c(Arc::new(bytes.into())),
        }
    }

    pub fn gguf(name: impl Into<String>, bytes: impl Into<FileBytes>) -> Self {
        Self::gguf_from(name, FileSource::Memory(Arc::new(bytes.into())))
    }

    /// A GGUF wherever its bytes are: a file held outside the engine's memory is read a tensor
    /// at a time, and never held whole beside the weights.
    pub fn gguf_from(name: impl Into<String>, source: FileSource) -> Self {
        Self {
            name: name.into(),
            gguf_header: Default::default(),
            format: ModelFormat::Gguf(source),
        }
    }

    /// A GGUF that streamed in whole ([`gguf_stream::GgufStream::finish`]).
    pub fn streamed(name: impl Into<String>, streamed: gguf_stream::Streamed) -> Self {
        Self {
            name: name.into(),
            gguf_header: Default::default(),
            format: ModelFormat::Streamed(Box::new(streamed)),
        }
    }

    /// A single model file, GGUF or llama2.c, told apart by GGUF's magic.
    pub fn single(name: impl Into<String>, bytes: impl Into<FileBytes>) -> Self {
        Self::single_from(name, FileSource::Memory(Arc::new(bytes.into())))
    }

    /// [`single`](Self::single) wherever its bytes are: a GGUF outside memory stays there (read a
    /// tensor at a time), a llama2.c `.bin` is read into memory whole (its f32 weights are used
    /// where they lie).
    pub fn single_from(name: impl Into<String>, source: FileSource) -> Self {
        if gguf::is_gguf(&source.range(0, 4.min(source.len()))) {
            return Self::gguf_from(name, source);
        }
        Self {
            name: name.into(),
            gguf_header: Default::default(),
            format: ModelFormat::Llama2c(source.into_memory()),
        }
    }

    /// The tokenizer the model file carries (GGUF), if any.
    pub fn embedded_tokenizer(&self) -> Result<Option<Tokenizer>> {
        let header = match &self.format {
            ModelFormat::Gguf(bytes) => self.gguf_header(bytes)?,
            // Made as the header arrived, before the tensors (gguf_stream.rs says why).
            ModelFormat::Streamed(streamed) => {
                return streamed.tokenizer.borrow_mut().take().transpose();
            }
            _ => return Ok(None),
        };
        // A model this engine does not run is named as such before its tokenizer is read (Gemma
        // 3's file would otherwise fail on its tokenizer's BOS id first).
        header.config()?;
        if header.get("tokenizer.ggml.model").is_none() {
            return Ok(None);
        }
        Tokenizer::from_gguf(header).map(Some)
    }

    fn gguf_header(&self, source: &FileSource) -> Result<&gguf::Gguf> {
        if self.gguf_header.get().is_none() {
            let header = match source {
                FileSource::Memory(file) => gguf::Gguf::parse(file.bytes())?,
                FileSource::Outside(_) => outside_header(source)?,
            };
            let _ = self.gguf_header.set(header);
        }
        Ok(self.gguf_header.get().expect("parsed above"))
    }

    pub fn hugging_face(
        name: impl Into<String>,
        config_json: Vec<u8>,
        safetensors: impl Into<FileBytes>,
    ) -> Self {
        Self {
            name: name.into(),
            gguf_header: Default::default(),
            format: ModelFormat::HuggingFace {
                config_json,
                safetensors: Arc::new(safetensors.into()),
            },
        }
    }

    /// Parse and validate into host weights.
    pub fn load(&self) -> Result<HostWeights> {
        match &self.format {
            ModelFormat::Llama2c(bytes) => llama2c::load(bytes),
            ModelFormat::Gguf(bytes) => {
                gguf::load(&gguf::Tensors::File(bytes), self.gguf_header(bytes)?)
            }
            ModelFormat::Streamed(streamed) => {
                gguf::load(&gguf::Tensors::Made(&streamed.made), &streamed.gguf)
            }
            ModelFormat::HuggingFace {
                config_json,
                safetensors,
            } => hf::load(config_json, safetensors.bytes()),
        }
    }

    /// Read from a path: a GGUF, a llama2.c `.bin`, a `.safetensors` with `config.json` beside it, or a
    /// Hugging Face model folder.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn from_path(path: &std::path::Path) -> Result<Self> {
        // Straight into aligned memory: the weights are then used where they lie.
        let read = |p: &std::path::Path| {
            FileBytes::read(p).map_err(|e| Error::Io(format!("{}: {e}", p.display())))
        };
        let name = path
            .file_stem()
            .map_or_else(|| "model".to_string(), |s| s.to_string_lossy().into_owned());
        if path.is_dir() {
            let folder_name = path
                .file_name()
                .map_or_else(|| "model".to_string(), |s| s.to_string_lossy().into_owned());
            return Ok(Self::hugging_face(
                folder_name,
                read(&path.join("config.json"))?.bytes().to_vec(),
                read(&path.join("model.safetensors"))?,
            ));
        }
        if path.extension().is_some_and(|e| e == "safetensors") {
            let config = path.with_file_name("config.json");
            return Ok(Self::hugging_face(
                name,
                read(&config)?.bytes().to_vec(),
                read(path)?,
            ));
        }
        Ok(Self::single(name, read(path)?))
    }
}
