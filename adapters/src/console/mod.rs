//! The console adapter behind `kaiwa chat`: reads the user's lines from any async reader
//! (stdin, a pipe, a test's buffer), prints the bot's replies to a writer, and renders
//! [`Outgoing::Options`] as a numbered list that the user answers with numbers.
//!
//! It opens (or resumes) the session of its place with [`Body::Open`], then sends each
//! non-empty line; it returns when the flow ends the session or the input closes. Admin
//! notices go to stderr through [`StderrAdminSink`]. It keeps only the last options shown,
//! to map a number back to a choice; the conversation itself lives in the store.
//!
//! On a terminal ([`ConsoleOptions::live`]) a one-line spinner turns while the bot works
//! and a reply that may stream is printed as it is written; through a pipe neither (the
//! output is the conversation and nothing else).

use crate::AdapterError;
use async_trait::async_trait;
use kaiwa_core::admin::{AdminNotice, AdminSink, DeliveryError};
use kaiwa_core::message::{
    Body, Incoming, OptionsRequest, Outgoing, Platform, SessionKey, UserRef,
};
use kaiwa_core::orchestrator::{ForAdapters, Outbox, Streamer};
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncWrite, AsyncWriteExt};

/// Who is talking and what to start.
#[derive(Debug, Clone)]
pub struct ConsoleOptions {
    /// The user id (and display name) of the person at the terminal.
    pub user: String,
    /// The flow to start when no session is active.
    pub flow: Option<String>,
    /// Its start argument (e.g. a form id).
    pub flow_arg: Option<String>,
    /// The output is a terminal: a spinner while the bot works, replies streamed.
    pub live: bool,
}

/// Why [`run`] returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConsoleExit {
    /// The flow ended the session.
    FlowEnded,
    /// The input closed.
    InputClosed,
}

/// The chat id every console session uses.
pub const CONSOLE_CHAT: &str = "console";

struct ConsoleOutbox<W> {
    out: Arc<tokio::sync::Mutex<W>>,
    last_options: Mutex<Option<OptionsRequest>>,
    live: bool,
    screen: Arc<Mutex<Screen>>,
}

/// What the terminal's last line holds besides the conversation.
#[derive(Default)]
struct Screen {
    /// A spinner frame is on it.
    spinner: bool,
    /// The reply being streamed, as printed so far.
    streamed: Option<String>,
}

fn screen(screen: &Mutex<Screen>) -> std::sync::MutexGuard<'_, Screen> {
    screen.lock().unwrap_or_else(|p| p.into_inner())
}

/// Wipes a spinner frame off the line.
const WIPE: &str = "\r    \r";

/// The spinner's frames (ASCII: any terminal shows them).
const FRAMES: [char; 4] = ['|', '/', '-', '\\'];

/// Prints a streamed reply as it grows (a terminal only).
struct ConsoleStreamer<W> {
    out: Arc<tokio::sync::Mutex<W>>,
    screen: Arc<Mutex<Screen>>,
}

#[async_trait]
impl<W: AsyncWrite + Send + Unpin + 'static> Streamer for ConsoleStreamer<W> {
    fn interval(&self) -> std::time::Duration {
        std::time::Duration::from_millis(50)
    }

    async fn show(&mut self, text: &str) -> Result<bool, DeliveryError> {
        let text = crate::markup::plain(text);
        let mut out = self.out.lock().await;
        let write = {
            let mut screen = screen(&self.screen);
            let mut write = String::new();
            if std::mem::take(&mut screen.spinner) {
                write.push_str(WIPE);
            }
            match screen.streamed.as_deref() {
                Some(printed) if text.starts_with(printed) => {
                    write.push_str(&text[printed.len()..]);
                }
                // the model started again: a new line
                Some(_) => {
                    write.push('\n');
                    write.push_str(&text);
                }
                None => write.push_str(&text),
            }
            screen.streamed = Some(text);
            write
        };
        out.write_all(write.as_bytes())
            .await
            .map_err(|e| DeliveryError::Disconnected(e.to_string()))?;
        out.flush()
            .await
            .map_err(|e| DeliveryError::Disconnected(e.to_string()))?;
        Ok(true)
    }

    async fn finish(self: Box<Self>) {
        screen(&self.screen).streamed = None;
    }
}

impl<W: AsyncWrite + Send + Unpin> ConsoleOutbox<W> {
    fn last_options(&self) -> Option<OptionsRequest> {
        self.last_options
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

/// Renders one outgoing item as terminal text (`None` for items with nothing to show).
pub fn render(item: &Outgoing) -> Option<String> {
    match item {
        Outgoing::Text { text } => Some(format!("{}\n", crate::markup::plain(text))),
        Outgoing::Options(req) => {
            let mut s = format!("{}\n", req.prompt);
            for (i, option) in req.options.iter().enumerate() {
                s.push_str(&format!("  {}. {}\n", i + 1, option.label));
            }
            // the hint in the options' own language
            let japanese =
                kaiwa_core::i18n::has_japanese(&req.prompt) && !req.prompt.contains(" / ");
            s.push_str(match (req.allow_multiple, japanese) {
                (true, false) => {
                    "(answer with one or more numbers, e.g. 1 3, or type your own answer)\n"
                }
                (false, false) => "(answer with a number, or type your own answer)\n",
                (true, true) => {
                    "（番号で答えてください。複数なら 1 3 のように。自由に入力もできます）\n"
                }
                (false, true) => "（番号で答えるか、自由に入力してください）\n",
            });
            Some(s)
        }
        Outgoing::StartThread { title } => Some(format!("— {title} —\n")),
        Outgoing::Typing => None,
    }
}

#[async_trait]
impl<W: AsyncWrite + Send + Unpin + 'static> Outbox for ConsoleOutbox<W> {
    async fn deliver(&self, _key: &SessionKey, items: &[Outgoing]) -> Result<(), DeliveryError> {
        let mut out = self.out.lock().await;
        let (spinner, mut streamed) = {
            let mut screen = screen(&self.screen);
            (std::mem::take(&mut screen.spinner), screen.streamed.take())
        };
        if spinner {
            out.write_all(WIPE.as_bytes())
                .await
                .map_err(|e| DeliveryError::Disconnected(e.to_string()))?;
        }
        // numbers answer the options of the latest reply only (cleared when the next line
        // is read; a reply may come item by item, options before a closing line)
        if let Some(latest) = items.iter().rev().find_map(|o| match o {
            Outgoing::Options(req) => Some(req.clone()),
            _ => None,
        }) {
            *self.last_options.lock().unwrap_or_else(|p| p.into_inner()) = Some(latest);
        }
        for item in items {
            let rendered = match (item, streamed.take()) {
                // the reply was streamed: what it printed is not printed again
                (Outgoing::Text { .. }, Some(printed)) => {
                    render(item).map(|text| match text.strip_prefix(printed.as_str()) {
                        Some(rest) => rest.to_string(),
                        None => format!("\n{text}"),
                    })
                }
                (_, printed) => {
                    streamed = printed;
                    render(item)
                }
            };
            if let Some(text) = rendered {
                out.write_all(text.as_bytes())
                    .await
                    .map_err(|e| DeliveryError::Disconnected(e.to_string()))?;
            }
        }
        if streamed.is_some() {
            // not replaced yet (a reply item by item): the next text does
            screen(&self.screen).streamed = streamed;
        }
        out.flush()
            .await
            .map_err(|e| DeliveryError::Disconnected(e.to_string()))
    }

    fn streamer(
        &self,
        _key: &SessionKey,
        _tap: &Arc<kaiwa_core::llm::stream::Tap>,
    ) -> Option<Box<dyn Streamer>> {
        self.live.then(|| {
            Box::new(ConsoleStreamer {
                out: self.out.clone(),
                screen: self.screen.clone(),
            }) as Box<dyn Streamer>
        })
    }
}

impl<W: AsyncWrite + Send + Unpin + 'static> ConsoleOutbox<W> {
    /// A turn, with the spinner turning (on a terminal) until something is printed.
    async fn handle(
        &self,
        orchestrator: &ForAdapters,
        incoming: Incoming,
    ) -> Result<kaiwa_core::orchestrator::TurnReport, kaiwa_core::orchestrator::OrchestratorError>
    {
        let turn = orchestrator.handle(incoming, self);
        if !self.live {
            return turn.await;
        }
        tokio::pin!(turn);
        // a quick turn shows no spinner
        let mut tick = tokio::time::interval_at(
            tokio::time::Instant::now() + std::time::Duration::from_millis(300),
            std::time::Duration::from_millis(120),
        );
        let mut frame = 0usize;
        let report = loop {
            tokio::select! {
                report = &mut turn => break report,
                _ = tick.tick() => {
                    let mut out = self.out.lock().await;
                    let draw = {
                        let mut screen = screen(&self.screen);
                        let draw = screen.streamed.is_none();
                        screen.spinner |= draw;
                        draw
                    };
                    if draw {
                        frame += 1;
                        let text = format!("\r{} ", FRAMES[frame % FRAMES.len()]);
                        let _ = out.write_all(text.as_bytes()).await;
                        let _ = out.flush().await;
                    }
                }
            }
        };
        let mut out = self.out.lock().await;
        let spinner = std::mem::take(&mut screen(&self.screen).spinner);
        if spinner {
            let _ = out.write_all(WIPE.as_bytes()).await;
            let _ = out.flush().await;
        }
        report
    }
}

/// Maps a typed line to a choice when it is made of option numbers of the last options.
pub fn choice_from_numbers(line: &str, options: &OptionsRequest) -> Option<Vec<String>> {
    let parts: Vec<&str> = line
        .split(|c: char| c == ',' || c.is_whitespace())
        .filter(|p| !p.is_empty())
        .collect();
    if parts.is_empty() || (!options.allow_multiple && parts.len() > 1) {
        return None;
    }
    let mut values = Vec::new();
    for part in parts {
        let n: usize = part.parse().ok()?;
        let option = options.options.get(n.checked_sub(1)?)?;
        if !values.contains(&option.value) {
            values.push(option.value.clone());
        }
    }
    Some(values)
}

/// Runs a console conversation until the flow ends or `input` closes.
pub async fn run<R, W>(
    orchestrator: &ForAdapters,
    input: R,
    output: W,
    options: ConsoleOptions,
) -> Result<ConsoleExit, AdapterError>
where
    R: AsyncBufRead + Unpin,
    W: AsyncWrite + Send + Unpin + 'static,
{
    let outbox = ConsoleOutbox {
        out: Arc::new(tokio::sync::Mutex::new(output)),
        last_options: Mutex::new(None),
        live: options.live,
        screen: Default::default(),
    };
    let run_id = kaiwa_core::message::new_request_id();
    let mut counter = 0u64;
    let mut next = |body: Body| {
        counter += 1;
        Incoming {
            platform: Platform::Console,
            chat: CONSOLE_CHAT.into(),
            thread: String::new(),
            user: UserRef {
                id: options.user.clone(),
                display_name: options.user.clone(),
                language: None,
            },
            message_id: format!("{run_id}-{counter}"),
            body,
            flow: options.flow.clone(),
            flow_arg: options.flow_arg.clone(),
            shared: false,
        }
    };
    let report = outbox.handle(orchestrator, next(Body::Open)).await?;
    if report.finished {
        return Ok(ConsoleExit::FlowEnded);
    }
    let mut input = input;
    let mut raw = Vec::new();
    loop {
        raw.clear();
        if input.read_until(b'\n', &mut raw).await? == 0 {
            break;
        }
        // bytes that are not UTF-8 (a terminal in another encoding, a binary file piped in)
        // become U+FFFD: the line is still answered and the conversation goes on
        let text = String::from_utf8_lossy(&raw);
        let line = text.trim_end_matches('\n').trim_end_matches('\r');
        if line.trim().is_empty() {
            continue;
        }
        let body = match outbox
            .last_options()
            .and_then(|o| choice_from_numbers(line, &o).map(|values| (o.request_id, values)))
        {
            Some((request_id, values)) => Body::Choice { request_id, values },
            None => Body::from_text(line),
        };
        // the options answered (or not) now belong to the past
        *outbox
            .last_options
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = None;
        let report = outbox.handle(orchestrator, next(body)).await?;
        if report.finished {
            return Ok(ConsoleExit::FlowEnded);
        }
    }
    Ok(ConsoleExit::InputClosed)
}

/// Admin notices on stderr (the console has no admin chat).
pub struct StderrAdminSink;

#[async_trait]
impl AdminSink for StderrAdminSink {
    async fn notify(&self, notice: &AdminNotice) -> Result<(), DeliveryError> {
        let mut err = tokio::io::stderr();
        let text = format!("--- admin ---\n{}-------------\n", notice.to_text());
        err.write_all(text.as_bytes())
            .await
            .map_err(|e| DeliveryError::Disconnected(e.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kaiwa_core::message::OptionItem;

    fn opts(multiple: bool) -> OptionsRequest {
        OptionsRequest::new(
            "Pick",
            vec![
                OptionItem::new("a", "A"),
                OptionItem::new("b", "B"),
                OptionItem::new("c", "C"),
            ],
            multiple,
        )
    }

    #[test]
    fn numbers_pick_options() {
        assert_eq!(
            choice_from_numbers("2", &opts(false)),
            Some(vec!["b".to_string()])
        );
        assert_eq!(
            choice_from_numbers("1, 3", &opts(true)),
            Some(vec!["a".to_string(), "c".to_string()])
        );
        assert_eq!(choice_from_numbers("1 3", &opts(false)), None);
        assert_eq!(choice_from_numbers("4", &opts(false)), None);
        assert_eq!(choice_from_numbers("0", &opts(false)), None);
        assert_eq!(choice_from_numbers("two", &opts(false)), None);
    }

    #[test]
    fn the_hint_follows_the_language_of_the_options() {
        let ja = OptionsRequest::new(
            "今の気分は？",
            vec![OptionItem::new("a", "わくわく")],
            false,
        );
        let text = render(&Outgoing::Options(ja)).unwrap_or_default();
        assert!(
            text.ends_with("（番号で答えるか、自由に入力してください）\n"),
            "{text}"
        );
        // a prompt in both languages keeps the English hint
        let both = OptionsRequest::new("Which? / どれ？", vec![OptionItem::new("a", "A")], false);
        let text = render(&Outgoing::Options(both)).unwrap_or_default();
        assert!(text.contains("(answer with a number"), "{text}");
    }

    #[test]
    fn options_render_as_a_numbered_list() {
        let text = render(&Outgoing::Options(opts(true))).unwrap_or_default();
        assert!(text.starts_with("Pick\n  1. A\n  2. B\n  3. C\n"));
        assert!(text.contains("one or more numbers"));
    }
}
