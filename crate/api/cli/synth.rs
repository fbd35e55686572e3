//! The commands that write model files: `tokenometer synth` (seeded random weights of a real
//! model's shape, as a llama2.c `.bin` or a GGUF carrying a given tokenizer) and `tokenometer
//! convert` (a `llama` GGUF re-encoded to F32, Q8_0 or Q4_0, its tokenizer kept).

use std::io::Write;
use std::path::Path;

use crate::error::Error;
use crate::formats::Format;
use crate::loading::synth::Shape;
use crate::model::Quant;

/// `synth`: seeded random weights of `shape` (with `layers` instead of its own, if given) as a
/// llama2.c `.bin`, or as a GGUF with the tokenizer of the GGUF `vocab`.
pub(super) fn synth(
    shape: Shape,
    out: &Path,
    seed: u64,
    layers: Option<u32>,
    vocab: Option<&Path>,
    q8: bool,
) -> Result<(), Error> {
    let mut config = shape.config();
    if let Some(layers) = layers {
        config.n_layers = layers as usize;
    }
    let gguf = out
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("gguf"));
    let tokenizer = match (gguf, vocab) {
        (true, Some(path)) => {
            let bytes =
                std::fs::read(path).map_err(|e| Error::Io(format!("{}: {e}", path.display())))?;
            let header = crate::loading::gguf::Gguf::parse(&bytes)?;
            let size = header
                .get("tokenizer.ggml.tokens")
                .and_then(crate::loading::gguf::Value::as_array)
                .map_or(0, <[_]>::len);
            if size != config.vocab_size {
                return Err(Error::BadTokenizer(format!(
                    "{} holds {size} tokens but {} has a vocabulary of {}; give a vocabulary of \
                     that size",
                    path.display(),
                    shape.name(),
                    config.vocab_size
                )));
            }
            header.into_tokenizer_metadata()
        }
        (true, None) => {
            return Err(Error::Unsupported(
                "a GGUF carries its tokenizer: give --vocab with a GGUF whose tokenizer to copy"
                    .into(),
            ));
        }
        (false, _) if q8 || vocab.is_some() => {
            return Err(Error::Unsupported(
                "--vocab and --q8 write a GGUF: name the output file *.gguf".into(),
            ));
        }
        (false, _) => Vec::new(),
    };
    let weights = crate::loading::synth::weights(&config, seed);
    let file =
        std::fs::File::create(out).map_err(|e| Error::Write(format!("{}: {e}", out.display())))?;
    let mut writer = std::io::BufWriter::new(file);
    let written = if gguf {
        let form = q8.then_some(Format::Q8_0);
        let mut metadata = crate::loading::gguf_writer::llama_metadata(shape.name(), &config, form);
        metadata.extend(tokenizer);
        crate::loading::gguf_writer::write_model(&weights, &metadata, form, &mut writer)
    } else {
        crate::loading::llama2c::write(&weights, &mut writer)
    };
    written
        .and_then(|()| writer.flush())
        .map_err(|e| Error::Write(format!("{}: {e}", out.display())))?;
    eprintln!(
        "wrote {} ({} parameters, {}{}, seed {seed})",
        out.display(),
        config.parameter_count(),
        shape.name(),
        layers.map_or(String::new(), |n| format!(" with {n} layers")),
    );
    Ok(())
}

/// `convert`: the `llama`, `qwen2` or `qwen3` GGUF `model` re-encoded to `to` (f32, q8 or q4) as a GGUF at `out`, its
/// tokenizer and chat template kept: each matrix widened by its type's reference, then quantized by
/// the format's reference quantizer (the tests run llama.cpp and tokenometer on the same file).
pub(super) fn convert(model: &Path, to: Quant, out: &Path) -> Result<(), Error> {
    let form = match to {
        Quant::F32 => None,
        Quant::Q8 | Quant::Q4 => to.format(),
        Quant::Stored => {
            return Err(Error::Unsupported(
                "convert writes f32, q8 or q4: choose one with --to".into(),
            ));
        }
    };
    let bytes = std::fs::read(model).map_err(|e| Error::Io(format!("{}: {e}", model.display())))?;
    let header = crate::loading::gguf::Gguf::parse(&bytes)?;
    let file = std::sync::Arc::new(crate::model::FileBytes::from(bytes.as_slice()));
    let weights =
        crate::loading::gguf::load(&crate::loading::gguf::Tensors::File(&file.into()), &header)?;
    // Sliding windows (Gemma 3) are written but not yet checked against llama.cpp: not offered.
    if weights.config.recipe.sliding.is_some() {
        return Err(Error::Unsupported(format!(
            "convert writes llama, qwen2 and qwen3 models; this file is {}: run it as stored, or \
             re-encode it at load with --quant",
            weights.config.recipe.name
        )));
    }
    let name = header
        .get("general.name")
        .and_then(crate::loading::gguf::Value::as_str)
        .unwrap_or("model")
        .to_string();
    let mut metadata = crate::loading::gguf_writer::llama_metadata(&name, &weights.config, form);
    metadata.extend(header.into_tokenizer_metadata());
    let written = std::fs::File::create(out).and_then(|f| {
        let mut writer = std::io::BufWriter::new(f);
        crate::loading::gguf_writer::write_model(&weights, &metadata, form, &mut writer)?;
        writer.flush()
    });
    written.map_err(|e| Error::Write(format!("{}: {e}", out.display())))?;
    eprintln!("wrote {} ({name} as {to})", out.display());
    Ok(())
}
