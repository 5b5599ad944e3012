//! `/help`: the generic commands, every flow's start commands and the active flow's own.

use crate::orchestrator::*;

impl Orchestrator {
    pub(in crate::orchestrator) fn help_text(&self, active: Option<&SessionRecord>) -> String {
        let ja = active.and_then(|s| s.language.as_deref()) == Some("ja");
        let mut out = String::from(if ja {
            "使えるコマンド:\n"
        } else {
            "Commands:\n"
        });
        for c in crate::flow::GENERIC_COMMANDS {
            let description = if ja {
                c.description_ja
            } else {
                c.description_en
            };
            out.push_str(&format!("/{} — {description}\n", c.name));
        }
        for flow in self.flows.iter() {
            for c in flow.start_commands() {
                out.push_str(&format!(
                    "/{} — {}\n",
                    c.name,
                    if ja {
                        c.description_ja
                    } else {
                        c.description_en
                    }
                ));
            }
        }
        if let Some(flow) = active.and_then(|s| self.flows.get(&s.flow)) {
            for c in flow.commands() {
                out.push_str(&format!(
                    "/{} — {}\n",
                    c.name,
                    if ja {
                        c.description_ja
                    } else {
                        c.description_en
                    }
                ));
            }
        }
        out.trim_end().to_string()
    }
}
