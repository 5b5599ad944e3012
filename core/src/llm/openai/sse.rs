//! Reading a streamed chat completion: Server-Sent Events (`data: {chunk}` lines, `data:
//! [DONE]` at the end) put together into one [`ChatResponse`], its text pushed to the
//! turn's [`Tap`] as it comes, tool calls assembled from their pieces by index.

use super::{WireFunctionIn, WireUsage, function_call, truncate, without_url};
use crate::llm::stream::Tap;
use crate::llm::{ChatResponse, ModelError, TokenUsage};
use serde::Deserialize;
use serde_json::Value;

/// How a stream ended when it did not end well.
pub(super) enum StreamEnd {
    TimedOut,
    /// The connection broke before the answer was complete (worth another try).
    Lost(ModelError),
    /// The server sent something that is not a chat completion chunk.
    Bad(ModelError),
}

/// Reads a Server-Sent Events answer (`data: {chunk}` lines, `data: [DONE]` at the end),
/// pushing its text to `tap`; a Stop drops the connection and keeps the text so far.
pub(super) async fn read_stream(
    mut response: reqwest::Response,
    tap: &Tap,
) -> Result<ChatResponse, StreamEnd> {
    let mut answer = StreamedAnswer::default();
    let mut pending: Vec<u8> = Vec::new();
    loop {
        let chunk = tokio::select! {
            chunk = response.chunk() => chunk,
            _ = tap.stopped() => {
                // dropping the response closes the connection: the server stops generating
                drop(response);
                tracing::info!("the user stopped the answer");
                return answer.finish();
            }
        };
        let bytes = match chunk {
            Ok(Some(bytes)) => bytes,
            // the server closed the stream (some send no [DONE])
            Ok(None) => return answer.finish(),
            Err(e) if e.is_timeout() => return Err(StreamEnd::TimedOut),
            Err(e) => return Err(StreamEnd::Lost(ModelError::Connect(without_url(&e)))),
        };
        pending.extend_from_slice(&bytes);
        while let Some(end) = pending.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = pending.drain(..=end).collect();
            let line = String::from_utf8_lossy(&line);
            let Some(data) = line.trim_end().strip_prefix("data:") else {
                // comments (`: keep-alive`), `event:` and blank separators
                continue;
            };
            let data = data.trim();
            if data == "[DONE]" {
                return answer.finish();
            }
            answer.add(data, tap).map_err(StreamEnd::Bad)?;
        }
    }
}

/// A streamed answer put together from its chunks.
#[derive(Default)]
struct StreamedAnswer {
    text: String,
    /// By index: id, name, arguments.
    calls: Vec<(Option<String>, String, String)>,
    usage: TokenUsage,
}

impl StreamedAnswer {
    fn add(&mut self, data: &str, tap: &Tap) -> Result<(), ModelError> {
        let chunk: WireChunk = serde_json::from_str(data).map_err(|e| {
            ModelError::Malformed(format!(
                "{e} (stream chunk starts with {:?})",
                truncate(data, 120)
            ))
        })?;
        if let Some(error) = chunk.error {
            return Err(ModelError::Malformed(format!(
                "server reported an error: {}",
                truncate(&error.to_string(), 300)
            )));
        }
        if let Some(u) = chunk.usage {
            self.usage = TokenUsage {
                prompt_tokens: u.prompt_tokens.unwrap_or(0),
                completion_tokens: u.completion_tokens.unwrap_or(0),
            };
        }
        let Some(delta) = chunk.choices.into_iter().next().and_then(|c| c.delta) else {
            return Ok(());
        };
        if let Some(text) = delta.content.as_ref().and_then(Value::as_str) {
            self.text.push_str(text);
            // text that comes with tool calls is not the reply
            if self.calls.is_empty() {
                tap.push(text);
            }
        }
        for call in delta.tool_calls.unwrap_or_default() {
            if self.calls.is_empty() {
                tap.reset();
            }
            let index = call.index.unwrap_or(self.calls.len().saturating_sub(1));
            if index >= self.calls.len() {
                self.calls.resize_with(index + 1, Default::default);
            }
            let slot = &mut self.calls[index];
            if let Some(id) = call.id.filter(|id| !id.is_empty()) {
                slot.0 = Some(id);
            }
            if let Some(f) = call.function {
                if let Some(name) = f.name {
                    slot.1.push_str(&name);
                }
                match f.arguments {
                    Some(Value::String(s)) => slot.2.push_str(&s),
                    Some(Value::Null) | None => {}
                    Some(other) => slot.2.push_str(&other.to_string()),
                }
            }
        }
        Ok(())
    }

    fn finish(self) -> Result<ChatResponse, StreamEnd> {
        let mut tool_calls = Vec::new();
        for (index, (id, name, arguments)) in self.calls.into_iter().enumerate() {
            let f = WireFunctionIn {
                name: Some(name),
                arguments: Some(Value::String(arguments)),
            };
            tool_calls.push(function_call(index, id, f).map_err(StreamEnd::Bad)?);
        }
        Ok(ChatResponse {
            text: Some(self.text).filter(|t| !t.trim().is_empty()),
            tool_calls,
            usage: self.usage,
        })
    }
}

#[derive(Deserialize)]
struct WireChunk {
    #[serde(default)]
    choices: Vec<WireChunkChoice>,
    #[serde(default)]
    usage: Option<WireUsage>,
    #[serde(default)]
    error: Option<Value>,
}

#[derive(Deserialize)]
struct WireChunkChoice {
    #[serde(default)]
    delta: Option<WireDelta>,
}

#[derive(Deserialize)]
struct WireDelta {
    #[serde(default)]
    content: Option<Value>,
    #[serde(default)]
    tool_calls: Option<Vec<WireToolCallDelta>>,
}

#[derive(Deserialize)]
struct WireToolCallDelta {
    #[serde(default)]
    index: Option<usize>,
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    function: Option<WireFunctionDelta>,
}

#[derive(Deserialize)]
struct WireFunctionDelta {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    arguments: Option<Value>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stream_is_put_together_from_its_chunks() {
        let tap = Tap::default();
        let mut answer = StreamedAnswer::default();
        for data in [
            r#"{"choices":[{"delta":{"role":"assistant","content":"Hel"}}]}"#,
            r#"{"choices":[{"delta":{"content":"lo"}}]}"#,
            r#"{"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":2}}"#,
        ] {
            answer.add(data, &tap).expect("a chunk");
        }
        assert_eq!(tap.text(), "Hello");
        let r = answer.finish().ok().expect("complete");
        assert_eq!(r.text.as_deref(), Some("Hello"));
        assert_eq!(r.usage.completion_tokens, 2);

        // tool calls arrive in pieces by index; their text is not the reply
        let mut answer = StreamedAnswer::default();
        for data in [
            r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"id":"c1","function":{"name":"search","arguments":"{\"q\""}}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":":\"x\"}"}}]}}]}"#,
        ] {
            answer.add(data, &tap).expect("a chunk");
        }
        assert_eq!(tap.text(), "");
        let r = answer.finish().ok().expect("complete");
        assert_eq!(r.tool_calls[0].name, "search");
        assert_eq!(r.tool_calls[0].arguments, r#"{"q":"x"}"#);
        assert!(StreamedAnswer::default().add("<html>", &tap).is_err());
    }
}
