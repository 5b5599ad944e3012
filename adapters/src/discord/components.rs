//! Options as Discord components: buttons for a single choice (5 per row, 5 rows), a select
//! menu for several; custom ids carry the request's short id and an index ([`Press`]).

use crate::interaction::Press;
use crate::split::truncate;
use kaiwa_core::message::OptionsRequest;
use serenity::all::{
    ButtonStyle, CreateActionRow, CreateButton, CreateSelectMenu, CreateSelectMenuKind,
    CreateSelectMenuOption,
};

/// Buttons per row and rows per message.
const PER_ROW: usize = 5;

const MAX_ROWS: usize = 5;

/// Options a select menu can hold.
const MAX_SELECT: usize = 25;

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
