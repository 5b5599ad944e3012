//! `/help`: the generic commands, every flow's start commands and the active flow's own.

use crate::flow::CommandInfo;
use crate::orchestrator::Orchestrator;
use crate::store::SessionRecord;

impl Orchestrator {
    /// The commands: the generic ones, each flow's start command and the active flow's,
    /// described in `lang`.
    pub(in crate::orchestrator) fn help_text(
        &self,
        active: Option<&SessionRecord>,
        lang: &str,
    ) -> String {
        let ja = lang == "ja";
        let mut commands: Vec<CommandInfo> = crate::flow::GENERIC_COMMANDS.to_vec();
        for flow in self.flows.iter() {
            commands.extend(flow.start_commands());
        }
        if let Some(flow) = active.and_then(|s| self.flows.get(&s.flow)) {
            commands.extend(flow.commands());
        }
        let mut out = String::from(if ja {
            "使えるコマンド:"
        } else {
            "Commands:"
        });
        for c in commands {
            let description = if ja {
                c.description_ja
            } else {
                c.description_en
            };
            out.push_str(&format!("\n/{} — {description}", c.name));
        }
        out
    }
}
