package native

import (
	"encoding/json"
	"fmt"

	"github.com/batchd/batchd/engine"
	"github.com/batchd/batchd/wire"
)

// refuseMedia returns the 400 for the first content part of messages that
// is not text (an image, audio or video part: this engine is text only),
// naming it as messages[i].content[j]; nil when every part is text. Bodies
// that do not decode are left to the template, which names their fault.
func refuseMedia(messages json.RawMessage) *engine.Response {
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
				param := fmt.Sprintf("messages[%d].content[%d]", i, j)
				msg := fmt.Sprintf("%s: content part type %q is not supported: the native engine is text only; send images, audio and video to a remote engine (engine: openai)", param, *p.Type)
				return badRequest(msg, param, wire.CodeUnsupportedContent)
			}
		}
	}
	return nil
}
