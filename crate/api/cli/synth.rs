//! `tokenometer synth`: seeded random weights of a real model's shape, as a llama2.c `.bin` or a
//! GGUF carrying a given tokenizer.

use std::io::Write;
use std::path::Path;

use crate::error::Error;
use crate::loading::synth::Shape;

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
        let mut metadata = crate::loading::gguf_writer::llama_metadata(shape.name(), &config, q8);
        metadata.extend(tokenizer);
        crate::loading::gguf_writer::write_model(&weights, &metadata, q8, &mut writer)
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
