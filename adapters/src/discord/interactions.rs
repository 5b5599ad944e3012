//! Interactions: presses of Kaiwa's buttons and menus (a choice, a Stop, an admin's
//! action) and its slash commands.

use super::MESSAGE_LIMIT;
use super::components::components;
use super::gateway::Handler;
use super::messages::user_ref;
use super::places::{Place, target_of};
use crate::interaction::{
    ALREADY_COMPLETE, NAMESPACE, Press, SAVE_FAILED, STALE_NOTICE, chosen_values, pending_request,
    shown_choice,
};
use crate::split::truncate;
use kaiwa_core::admin::AdminAction;
use kaiwa_core::message::{Body, Incoming, Platform, SessionKey, UserRef};
use serenity::all::{
    CommandDataOptionValue, CommandInteraction, ComponentInteraction, ComponentInteractionDataKind,
    Context, CreateInteractionResponse, CreateInteractionResponseMessage, EditInteractionResponse,
};

impl Handler {
    /// A button under an admin notice: answered at once (deferred), done, then the outcome
    /// shown in the admin channel for every admin to see.
    async fn on_admin_action(
        &self,
        ctx: &Context,
        component: &ComponentInteraction,
        action: AdminAction,
    ) {
        let defer = CreateInteractionResponse::Defer(CreateInteractionResponseMessage::new());
        if let Err(e) = component.create_response(&ctx.http, defer).await {
            tracing::warn!(error = %e, "could not acknowledge an admin's press");
        }
        let by = SessionKey {
            platform: Platform::Discord,
            chat: component.channel_id.get().to_string(),
            thread: String::new(),
            user: component.user.id.get().to_string(),
        };
        let name = component
            .user
            .global_name
            .clone()
            .unwrap_or_else(|| component.user.name.clone());
        let outcome = self.orchestrator.admin_action(&by, &name, action).await;
        let said = if outcome.posted {
            "Done.".to_string()
        } else {
            outcome.text
        };
        let done = EditInteractionResponse::new().content(truncate(&said, MESSAGE_LIMIT));
        if let Err(e) = component.edit_response(&ctx.http, done).await {
            tracing::warn!(error = %e, "could not show the outcome of an admin's press");
        }
    }

    pub(super) async fn on_component(&self, ctx: &Context, component: ComponentInteraction) {
        if self.mounted && !component.data.custom_id.starts_with(NAMESPACE) {
            // the host's own component: neither acknowledged nor answered here
            return;
        }
        if !self.intake.first_sight(format!("i{}", component.id)) {
            return;
        }
        self.health.ok();
        if component.data.custom_id == super::edits::STOP_ID {
            // outside the session's queue: the turn writing the reply holds it
            let stopped = self
                .intake
                .turns()
                .outbox
                .streams()
                .stop(component.channel_id.get(), component.message.id.get());
            if !stopped {
                return self.ephemeral(ctx, &component, ALREADY_COMPLETE).await;
            }
            let acknowledge = CreateInteractionResponse::Acknowledge;
            if let Err(e) = component.create_response(&ctx.http, acknowledge).await {
                tracing::warn!(error = %e, "could not acknowledge a Stop");
            }
            return;
        }
        if let Some(action) = AdminAction::decode(&component.data.custom_id) {
            return self.on_admin_action(ctx, &component, action).await;
        }
        let press = Press::decode(&component.data.custom_id);
        let dm = component.guild_id.is_none();
        let place = self.place_of(component.channel_id, dm).await;
        let (Some(press), Some(place)) = (press, place) else {
            return self.ephemeral(ctx, &component, STALE_NOTICE).await;
        };
        let key = SessionKey {
            platform: Platform::Discord,
            chat: place.chat.clone(),
            thread: place.thread.clone(),
            user: component.user.id.get().to_string(),
        };
        let request = match pending_request(&self.orchestrator, &key, press.request_id()).await {
            Ok(Some(request)) => request,
            Ok(None) => return self.ephemeral(ctx, &component, STALE_NOTICE).await,
            Err(e) => {
                tracing::error!(error = %e, "could not load the session");
                return self.ephemeral(ctx, &component, SAVE_FAILED).await;
            }
        };
        let indexes: Vec<usize> = match (&press, &component.data.kind) {
            (Press::Pick { index, .. }, _) => vec![*index],
            (Press::Select { .. }, ComponentInteractionDataKind::StringSelect { values }) => {
                values.iter().filter_map(|v| v.parse().ok()).collect()
            }
            _ => Vec::new(),
        };
        let Some(values) = chosen_values(&request, &indexes).filter(|v| !v.is_empty()) else {
            return self.ephemeral(ctx, &component, STALE_NOTICE).await;
        };
        // acknowledge at once (well within 3 s): show the choice, disable the components
        let shown = truncate(&shown_choice(&request, &values), MESSAGE_LIMIT);
        let update = CreateInteractionResponse::UpdateMessage(
            CreateInteractionResponseMessage::new()
                .content(shown)
                .components(components(&request, true)),
        );
        if let Err(e) = component.create_response(&ctx.http, update).await {
            tracing::warn!(error = %e, "could not acknowledge a component");
        }
        let reply_to = target_of(&place);
        let incoming = Incoming {
            platform: Platform::Discord,
            chat: place.chat,
            thread: place.thread,
            user: UserRef {
                // the client's language, which Discord tells with an interaction
                language: Some(component.locale.clone()),
                ..user_ref(&component.user)
            },
            message_id: format!("i{}", component.id),
            body: Body::Choice {
                request_id: request.request_id.clone(),
                values,
            },
            flow: place.flow,
            flow_arg: place.flow_arg,
            shared: !dm,
        };
        self.turn(incoming, reply_to).await;
    }

    pub(super) async fn ephemeral(
        &self,
        ctx: &Context,
        component: &ComponentInteraction,
        text: &str,
    ) {
        let response = CreateInteractionResponse::Message(
            CreateInteractionResponseMessage::new()
                .content(text)
                .ephemeral(true),
        );
        if let Err(e) = component.create_response(&ctx.http, response).await {
            tracing::warn!(error = %e, "could not answer a component");
        }
    }

    pub(super) async fn on_command(&self, ctx: &Context, command: CommandInteraction) {
        if self.mounted && !self.orchestrator.knows_command(&command.data.name) {
            // the host's command: its own handler answers it
            return;
        }
        if !self.intake.first_sight(format!("i{}", command.id)) {
            return;
        }
        self.health.ok();
        let dm = command.guild_id.is_none();
        let args = command
            .data
            .options
            .iter()
            .find_map(|o| match &o.value {
                CommandDataOptionValue::String(s) => Some(s.clone()),
                _ => None,
            })
            .unwrap_or_default();
        let defer = CreateInteractionResponse::Defer(CreateInteractionResponseMessage::new());
        if let Err(e) = command.create_response(&ctx.http, defer).await {
            tracing::warn!(error = %e, "could not defer a slash command");
        }
        let place = match self.place_of(command.channel_id, dm).await {
            Some(place) => place,
            // a command in a plain channel runs there, in the default flow
            None => Place {
                chat: command.channel_id.get().to_string(),
                thread: String::new(),
                flow: None,
                flow_arg: None,
            },
        };
        let reply_to = target_of(&place);
        let incoming = Incoming {
            platform: Platform::Discord,
            chat: place.chat,
            thread: place.thread,
            user: UserRef {
                language: Some(command.locale.clone()),
                ..user_ref(&command.user)
            },
            message_id: format!("i{}", command.id),
            body: Body::Command {
                name: command.data.name.clone(),
                args: args.trim().to_string(),
            },
            flow: place.flow,
            flow_arg: place.flow_arg,
            shared: !dm,
        };
        let http = ctx.http.clone();
        self.queue(incoming, reply_to, Some((Box::new(command), http)))
            .await;
    }
}
