//! Notifications for runs waiting at the gate (V2.md section 4; docs/notifications.md): the message
//! ([`message`]), how it is sent ([`transport`]), the signed decision links in it ([`link`]) and the pages
//! a link opens ([`page`]).

pub mod link;
pub mod message;
pub mod page;
mod text;
pub mod transport;
