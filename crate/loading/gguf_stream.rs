//! A GGUF read as it arrives (the page's download, or the browser's cache): the header is parsed
//! once its bytes are in, and each tensor is made into what the engine holds ([`Made`]) from its
//! bytes as they pass, so that the file is never held whole, in the engine's memory or beside it
//! (issue 43: the page held the whole download in the worker's memory while the weights were made
//! from it).

use std::cell::RefCell;
use std::collections::HashMap;

use crate::error::{Error, Result, clip};
use crate::formats::{Made, TensorBuilder};
use crate::loading::gguf::Gguf;
use crate::loading::tokenizer::Tokenizer;

/// The first try at the header, at this many bytes (a file that is not a GGUF is named at its
/// first bytes); then at twice as many each time until it fits (a 262k-token vocabulary takes
/// about 7 MB), so the tries cost at most twice the one that parses.
const FIRST_TRY: usize = 4;
/// A header longer than this is corrupt: the largest vocabularies take a tenth of it.
const MAX_HEADER: usize = 64 << 20;

/// A GGUF whose bytes are pushed in order, in pieces of any size ([`push`](Self::push)), then
/// [`finish`](Self::finish)ed.
pub struct GgufStream {
    /// The file's length, where it is known (a picked file's size).
    total: Option<usize>,
    /// Bytes pushed so far.
    at: usize,
    state: State,
}

enum State {
    /// The file's first bytes, until the header parses.
    Header {
        bytes: Vec<u8>,
        next_try: usize,
    },
    Tensors(Box<Body>),
}

/// The tensors, made in the file's order as their bytes pass.
struct Body {
    gguf: Gguf,
    tokenizer: Option<Result<Tokenizer>>,
    /// Name, first byte and end of each tensor, by place in the file.
    order: Vec<(String, usize, usize)>,
    /// The tensor whose bytes come next.
    next: usize,
    building: Option<TensorBuilder>,
    made: HashMap<String, Made>,
}

/// A GGUF that streamed in whole: its header and its tensors, made.
pub struct Streamed {
    pub gguf: Gguf,
    /// The tokenizer the file carries, made from the header before any tensor (for the loader to
    /// take; an error where it cannot be made, said only if it is used).
    pub tokenizer: RefCell<Option<Result<Tokenizer>>>,
    /// Each tensor by name, taken once by the loader.
    pub made: RefCell<HashMap<String, Made>>,
}

impl GgufStream {
    /// A stream of a file `total` bytes long, where that is known.
    pub fn new(total: Option<usize>) -> GgufStream {
        GgufStream {
            total,
            at: 0,
            state: State::Header {
                bytes: Vec::new(),
                next_try: FIRST_TRY,
            },
        }
    }

    /// The file's next bytes. A header that cannot be a GGUF's is an error at once.
    pub fn push(&mut self, bytes: &[u8]) -> Result<()> {
        let at = self.at;
        self.at += bytes.len();
        if let Some(total) = self.total.filter(|&t| self.at > t) {
            return Err(Error::BadModel(format!(
                "the model file gave more than the {total} bytes it was said to hold"
            )));
        }
        match &mut self.state {
            State::Tensors(body) => body.take(at, bytes),
            State::Header { bytes: start, .. } => {
                start.extend_from_slice(bytes);
                self.try_header(false)
            }
        }
    }

    /// Parse the header once enough bytes are in (or at the `end` of the file, whatever is in),
    /// and make the tensors of the bytes that came with it.
    fn try_header(&mut self, end: bool) -> Result<()> {
        let State::Header { bytes, next_try } = &mut self.state else {
            return Ok(());
        };
        if bytes.len() < *next_try && !end {
            return Ok(());
        }
        let file_len = match end {
            true => self.at,
            false => self.total.unwrap_or(usize::MAX),
        };
        let Some(gguf) = Gguf::parse_start(bytes, file_len)? else {
            if bytes.len() > MAX_HEADER {
                return Err(Error::BadModel(format!(
                    "the GGUF header runs past its first {} MB: the file is corrupt",
                    MAX_HEADER >> 20
                )));
            }
            *next_try = 2 * bytes.len();
            return Ok(());
        };
        let mut order: Vec<(String, usize, usize)> = gguf
            .tensors
            .iter()
            .map(|(name, info)| (name.clone(), info.start, info.end))
            .collect();
        order.sort_by_key(|&(_, start, _)| start);
        // A model this engine does not run is named now, not after the whole download; and its
        // tokenizer is made before the tensors: the memory its making takes for a while (50 MB
        // for SmolLM2's 49,152 tokens, measured natively) is then let go before the weights come,
        // and the page's memory, which never shrinks, does not hold it beside them.
        gguf.config()?;
        let tokenizer = gguf
            .get("tokenizer.ggml.model")
            .map(|_| Tokenizer::from_gguf(&gguf));
        let bytes = std::mem::take(bytes);
        let mut body = Body {
            gguf,
            tokenizer,
            order,
            next: 0,
            building: None,
            made: HashMap::new(),
        };
        body.take(0, &bytes)?;
        self.state = State::Tensors(Box::new(body));
        Ok(())
    }

    /// The file has ended: its header and every tensor, or a sentence saying where it broke off.
    pub fn finish(mut self) -> Result<Streamed> {
        if let Some(total) = self.total.filter(|&t| self.at < t) {
            return Err(Error::BadModel(format!(
                "the model file ended after {} of its {total} bytes; download it again",
                self.at
            )));
        }
        self.try_header(true)?;
        let State::Tensors(body) = self.state else {
            unreachable!("the header parses, or is an error, at the end of the file")
        };
        if let Some((name, start, end)) = body.order.get(body.next) {
            return Err(Error::BadModel(format!(
                "the model file ended at byte {}, before the end of tensor {} (bytes {start} to \
                 {end}): it is truncated; download it again",
                self.at,
                clip(name)
            )));
        }
        Ok(Streamed {
            gguf: body.gguf,
            tokenizer: RefCell::new(body.tokenizer),
            made: RefCell::new(body.made),
        })
    }
}

impl Body {
    /// Bytes that start at byte `at` of the file: the tensors they hold are made, the rest (the
    /// header, alignment padding) passed over.
    fn take(&mut self, mut at: usize, mut bytes: &[u8]) -> Result<()> {
        while !bytes.is_empty() {
            let Some((name, start, end)) = self.order.get(self.next) else {
                return Ok(());
            };
            if at < *start {
                let skip = (start - at).min(bytes.len());
                at += skip;
                bytes = &bytes[skip..];
                continue;
            }
            let kind = self.gguf.tensors[name].kind;
            let building = self
                .building
                .get_or_insert_with(|| kind.builder(end - start));
            let n = (end - at).min(bytes.len());
            building.push(&bytes[..n]);
            at += n;
            bytes = &bytes[n..];
            if at == *end {
                let made = self
                    .building
                    .take()
                    .expect("being built")
                    .finish()
                    .map_err(|e| Error::BadModel(format!("GGUF tensor {}: {e}", clip(name))))?;
                self.made.insert(name.clone(), made);
                self.next += 1;
            }
        }
        Ok(())
    }
}
