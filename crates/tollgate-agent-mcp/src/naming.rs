//! The name an MCP tool is offered to the model under (docs/configuration.md): `SERVER__TOOL`, with every character
//! outside `[A-Za-z0-9_-]` replaced by `_`; a result longer than 64 characters is cut to 55 and given `_` +
//! the first 8 lowercase hex digits of the sha256 of the full name as it was before any replacement.
//!
//! The promise: the result always matches `^[A-Za-z0-9_-]{1,64}$` (what model APIs accept for a function
//! name), and it depends only on the two names, so it is stable across restarts and machines.

use sha2::{Digest, Sha256};

/// The longest tool name model APIs accept.
pub const MAX_TOOL_NAME_LEN: usize = 64;

/// How many characters of a too-long name are kept before `_` and the hash.
const KEPT_PREFIX_LEN: usize = 55;

/// How many hex digits of the sha256 end a shortened name.
const HASH_DIGITS: usize = 8;

/// The Tollgate name of tool `tool` of MCP server `server`, e.g. `files__read_file`.
pub fn tool_name(server: &str, tool: &str) -> String {
    let full = format!("{server}__{tool}");
    let replaced: String =
        full.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' || c == '-' { c } else { '_' }).collect();
    // Every char is ASCII now, so byte length is character count.
    if replaced.len() <= MAX_TOOL_NAME_LEN {
        return replaced;
    }
    let digest = hex::encode(Sha256::digest(full.as_bytes()));
    format!("{}_{}", &replaced[..KEPT_PREFIX_LEN], &digest[..HASH_DIGITS])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_names_are_joined_with_two_underscores() {
        assert_eq!(tool_name("files", "read_file"), "files__read_file");
        assert_eq!(tool_name("git-hub", "list-prs"), "git-hub__list-prs");
    }

    #[test]
    fn characters_outside_the_allowed_set_become_underscores() {
        assert_eq!(tool_name("my server", "get.item/v2"), "my_server__get_item_v2");
        // One `_` per character, not per byte: `é` is two bytes in UTF-8.
        assert_eq!(tool_name("café", "thé:noir"), "caf___th__noir");
    }

    #[test]
    fn a_name_of_exactly_64_characters_is_kept() {
        let tool = "x".repeat(61);
        let name = tool_name("s", &tool);
        assert_eq!(name.len(), 64);
        assert_eq!(name, format!("s__{tool}"));
    }

    #[test]
    fn a_name_of_65_characters_is_cut_to_55_plus_hash() {
        // sha256("s__" + 62 × "x") starts with 382c910f.
        let name = tool_name("s", &"x".repeat(62));
        assert_eq!(name, "s__xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx_382c910f");
        assert_eq!(name.len(), MAX_TOOL_NAME_LEN);
    }

    #[test]
    fn a_long_name_is_hashed_before_replacement() {
        let name = tool_name("files", "a_very_long_tool_name_that_keeps_going_and_going_past_the_limit");
        assert_eq!(name, "files__a_very_long_tool_name_that_keeps_going_and_going_579ba583");
        // sha256 of the original (with `.`, spaces, `☃` and accents), not of the replaced name.
        let name = tool_name("srv.v2", "lire le fichier ☃ très long pour dépasser la limite de soixante-quatre");
        assert_eq!(name, "srv_v2__lire_le_fichier___tr_s_long_pour_d_passer_la_li_7e24362d");
    }

    #[test]
    fn names_that_differ_only_in_replaced_characters_collide_below_the_limit() {
        // Documented consequence of the rule; McpSource drops the later duplicate with a warning.
        assert_eq!(tool_name("s", "a.b"), tool_name("s", "a_b"));
    }
}
