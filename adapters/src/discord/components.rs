//! Options as Discord components: buttons for a single choice (5 per row, 5 rows), a select
//! menu for several; custom ids carry the request's short id and an index ([`Press`]).

use crate::split::truncate;
use kaiwa_core::message::OptionsRequest;
use serenity::all::{
    ButtonStyle, CreateActionRow, CreateButton, CreateSelectMenu, CreateSelectMenuKind,
    CreateSelectMenuOption,
};

/// What every custom id of Kaiwa's components starts with.
pub const NAMESPACE: &str = "kaiwa|";

/// Buttons per row and rows per message.
const PER_ROW: usize = 5;

const MAX_ROWS: usize = 5;

/// Options a select menu can hold.
const MAX_SELECT: usize = 25;

/// What a component carries in its custom id (always far below Discord's 100 characters).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Press {
    /// A button of a single-choice request.
    Pick { request_id: String, index: usize },
    /// The select menu of a multi-select request (the values are option indexes).
    Select { request_id: String },
}

impl Press {
    pub fn request_id(&self) -> &str {
        match self {
            Press::Pick { request_id, .. } | Press::Select { request_id } => request_id,
        }
    }

    pub fn encode(&self) -> String {
        match self {
            Press::Pick { request_id, index } => format!("kaiwa|p|{request_id}|{index}"),
            Press::Select { request_id } => format!("kaiwa|s|{request_id}"),
        }
    }

    pub fn decode(id: &str) -> Option<Press> {
        let mut parts = id.split('|');
        if parts.next()? != "kaiwa" {
            return None;
        }
        let kind = parts.next()?;
        let request_id = parts.next()?.to_string();
        if request_id.is_empty() || request_id.len() > 24 {
            return None;
        }
        let press = match kind {
            "p" => Press::Pick {
                request_id,
                index: parts.next()?.parse().ok()?,
            },
            "s" => Press::Select { request_id },
            _ => return None,
        };
        parts.next().is_none().then_some(press)
    }
}

/// The components of an options message; `disabled` after a choice.
pub fn components(request: &OptionsRequest, disabled: bool) -> Vec<CreateActionRow> {
    if request.allow_multiple {
        let options: Vec<CreateSelectMenuOption> = request
            .options
            .iter()
            .take(MAX_SELECT)
            .enumerate()
            .map(|(i, o)| CreateSelectMenuOption::new(truncate(&o.label, 100), i.to_string()))
            .collect();
        let count = options.len().max(1) as u8;
        let menu = CreateSelectMenu::new(
            Press::Select {
                request_id: request.request_id.clone(),
            }
            .encode(),
            CreateSelectMenuKind::String { options },
        )
        .placeholder("Choose one or more / 複数選べます")
        .min_values(1)
        .max_values(count)
        .disabled(disabled);
        return vec![CreateActionRow::SelectMenu(menu)];
    }
    let buttons: Vec<CreateButton> = request
        .options
        .iter()
        .take(PER_ROW * MAX_ROWS)
        .enumerate()
        .map(|(index, o)| {
            let press = Press::Pick {
                request_id: request.request_id.clone(),
                index,
            };
            CreateButton::new(press.encode())
                .label(truncate(&o.label, 80))
                .style(ButtonStyle::Primary)
                .disabled(disabled)
        })
        .collect();
    buttons
        .chunks(PER_ROW)
        .map(|row| CreateActionRow::Buttons(row.to_vec()))
        .collect()
}
