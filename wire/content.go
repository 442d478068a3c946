package wire

import (
	"encoding/json"
	"fmt"
)

// NonTextPart refuses the first content part of messages (a chat body's
// messages array) that is not text: an image, audio or video part, in the
// requests document's shape or OpenAI's, which the native engine cannot
// take (it is text only). The refusal names the part as
// messages[i].content[j]; nil when every part is text. Messages that do not
// decode are left to the caller's own checks, which name their fault.
func NonTextPart(messages json.RawMessage) *Invalid {
	var msgs []struct {
		Content json.RawMessage `json:"content"`
	}
	if json.Unmarshal(messages, &msgs) != nil {
		return nil
	}
	for i, m := range msgs {
		var parts []struct {
			Type *string `json:"type"`
		}
		if json.Unmarshal(m.Content, &parts) != nil {
			continue // a string, null, or not parts: not ours to judge
		}
		for j, p := range parts {
			if p.Type != nil && *p.Type != "text" {
				return &Invalid{Code: CodeUnsupportedContent, Param: fmt.Sprintf("messages[%d].content[%d]", i, j),
					Message: fmt.Sprintf("content part type %q is not supported: the native engine is text only; send images, audio and video to a remote engine (engine: openai)", *p.Type)}
			}
		}
	}
	return nil
}
