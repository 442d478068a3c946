package wire

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
)

// EndpointMessages is Anthropic's Messages endpoint. A batch line for it
// is run as a chat completion: MessagesToChat translates its body, and
// ChatToMessage translates the answer back.
const EndpointMessages = "/v1/messages"

// messagesRefused are the Messages fields batchd does not honour, and why.
var messagesRefused = map[string]string{
	"tools":       "tools are not supported on /v1/messages",
	"tool_choice": "tools are not supported on /v1/messages",
	"thinking":    "extended thinking is not supported on /v1/messages",
	"container":   "containers are not supported",
	"mcp_servers": "MCP servers are not supported",
}

// messagesBody is a Messages request body. Values checked by the chat
// rules after translation (numbers, the model) are kept raw.
type messagesBody struct {
	Model         json.RawMessage `json:"model"`
	System        json.RawMessage `json:"system"`
	Messages      json.RawMessage `json:"messages"`
	MaxTokens     json.RawMessage `json:"max_tokens"`
	StopSequences json.RawMessage `json:"stop_sequences"`
	Temperature   json.RawMessage `json:"temperature"`
	TopP          json.RawMessage `json:"top_p"`
	TopK          json.RawMessage `json:"top_k"`
	Stream        json.RawMessage `json:"stream"`
	Metadata      json.RawMessage `json:"metadata"`
	ServiceTier   json.RawMessage `json:"service_tier"`
}

// chatFromMessages is the translated body: the chat fields in the order
// they are written.
type chatFromMessages struct {
	Model       json.RawMessage `json:"model,omitempty"`
	Messages    []chatMsg       `json:"messages"`
	MaxTokens   json.RawMessage `json:"max_tokens"`
	Stop        json.RawMessage `json:"stop,omitempty"`
	Temperature json.RawMessage `json:"temperature,omitempty"`
	TopP        json.RawMessage `json:"top_p,omitempty"`
	TopK        json.RawMessage `json:"top_k,omitempty"`
}

type chatMsg struct {
	Role    string `json:"role"`
	Content any    `json:"content"` // a string, or []chatPart with an image
}

type chatPart struct {
	Type     string         `json:"type"`
	Text     string         `json:"text,omitempty"`
	ImageURL *chatImageURLs `json:"image_url,omitempty"`
}

type chatImageURLs struct {
	URL string `json:"url"`
}

// messagesBlock is one content block of a Messages message or system.
type messagesBlock struct {
	Type   string `json:"type"`
	Text   string `json:"text"`
	Source *struct {
		Type      string `json:"type"`
		MediaType string `json:"media_type"`
		Data      string `json:"data"`
		URL       string `json:"url"`
	} `json:"source"`
}

// MessagesToChat translates a /v1/messages body (a JSON object) into the
// /v1/chat/completions body that runs it: system (a string or text blocks)
// becomes a system message; each message's content (a string, or text and
// image blocks) its chat content; stop_sequences becomes stop; max_tokens
// (required), temperature, top_p and top_k are kept; metadata and
// service_tier are dropped. Fields batchd does not honour (tools,
// tool_choice, thinking, stream: true, any field Messages does not have)
// and blocks other than text and image are refused by name. Values the
// chat rules check (types and ranges of numbers, the model) are copied
// as given for them to check.
func MessagesToChat(body []byte) ([]byte, *Invalid) {
	if inv := checkKeys(body, messagesKey); inv != nil {
		return nil, inv
	}
	var in messagesBody
	if err := json.Unmarshal(body, &in); err != nil {
		return nil, &Invalid{CodeInvalidType, "body", fmt.Sprintf("is not a Messages request: %v", err)}
	}
	if !given(in.MaxTokens) {
		return nil, &Invalid{CodeMissingRequiredParameter, "max_tokens", "is required on /v1/messages"}
	}
	if given(in.Stream) && string(in.Stream) != "false" {
		return nil, &Invalid{CodeUnsupportedParameter, "stream", "streaming is not supported in a batch line"}
	}
	out := chatFromMessages{MaxTokens: in.MaxTokens, Temperature: in.Temperature, TopP: in.TopP, TopK: in.TopK}
	if given(in.Model) {
		out.Model = in.Model
	}
	if given(in.StopSequences) {
		var stops []string
		if err := json.Unmarshal(in.StopSequences, &stops); err != nil {
			return nil, &Invalid{CodeInvalidType, "stop_sequences", "must be an array of strings, got " + TypeName(in.StopSequences)}
		}
		if len(stops) > 0 {
			out.Stop = in.StopSequences
		}
	}
	if given(in.System) {
		text, inv := messagesText(in.System, "system")
		if inv != nil {
			return nil, inv
		}
		out.Messages = append(out.Messages, chatMsg{Role: "system", Content: text})
	}
	var msgs []struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	}
	if err := json.Unmarshal(in.Messages, &msgs); err != nil || len(msgs) == 0 {
		return nil, &Invalid{CodeInvalidType, "messages", "must be a non-empty array of {role, content} objects"}
	}
	for i, m := range msgs {
		param := fmt.Sprintf("messages[%d]", i)
		if m.Role != "user" && m.Role != "assistant" {
			return nil, &Invalid{CodeInvalidValue, param + ".role", fmt.Sprintf(`must be "user" or "assistant", got %s`, QuoteShort(m.Role))}
		}
		content, inv := messagesContent(m.Content, param+".content")
		if inv != nil {
			return nil, inv
		}
		out.Messages = append(out.Messages, chatMsg{Role: m.Role, Content: content})
	}
	b, err := json.Marshal(out)
	if err != nil {
		return nil, &Invalid{CodeInvalidValue, "body", fmt.Sprintf("cannot be translated: %v", err)}
	}
	return b, nil
}

// messagesKey refuses a top-level key of a Messages body batchd does not
// take.
func messagesKey(key string) *Invalid {
	switch key {
	case "model", "system", "messages", "max_tokens", "stop_sequences", "temperature", "top_p", "top_k", "stream", "metadata", "service_tier":
		return nil
	}
	if why, ok := messagesRefused[key]; ok {
		return &Invalid{CodeUnsupportedParameter, key, why}
	}
	return &Invalid{CodeUnsupportedParameter, key, "is not a field of /v1/messages that batchd takes"}
}

func given(v json.RawMessage) bool { return len(v) > 0 && string(v) != "null" }

// messagesText reads a string or an array of text blocks as one text.
func messagesText(v json.RawMessage, param string) (string, *Invalid) {
	var s string
	if json.Unmarshal(v, &s) == nil {
		return s, nil
	}
	var blocks []messagesBlock
	if err := json.Unmarshal(v, &blocks); err != nil {
		return "", &Invalid{CodeInvalidType, param, "must be a string or an array of text blocks, got " + TypeName(v)}
	}
	var b strings.Builder
	for i, bl := range blocks {
		if bl.Type != "text" {
			return "", &Invalid{CodeUnsupportedContent, fmt.Sprintf("%s[%d].type", param, i), fmt.Sprintf("must be \"text\", got %s", QuoteShort(bl.Type))}
		}
		if i > 0 {
			b.WriteString("\n\n")
		}
		b.WriteString(bl.Text)
	}
	return b.String(), nil
}

// messagesContent reads a message's content: a string, text blocks (one
// string), or text and image blocks (chat content parts).
func messagesContent(v json.RawMessage, param string) (any, *Invalid) {
	var s string
	if json.Unmarshal(v, &s) == nil {
		return s, nil
	}
	var blocks []messagesBlock
	if err := json.Unmarshal(v, &blocks); err != nil || len(blocks) == 0 {
		return nil, &Invalid{CodeInvalidType, param, "must be a string or a non-empty array of content blocks, got " + TypeName(v)}
	}
	parts := make([]chatPart, 0, len(blocks))
	images := false
	for i, bl := range blocks {
		p := fmt.Sprintf("%s[%d]", param, i)
		switch bl.Type {
		case "text":
			parts = append(parts, chatPart{Type: "text", Text: bl.Text})
		case "image":
			url, inv := imageSource(bl, p)
			if inv != nil {
				return nil, inv
			}
			images = true
			parts = append(parts, chatPart{Type: "image_url", ImageURL: &chatImageURLs{URL: url}})
		default:
			return nil, &Invalid{CodeUnsupportedContent, p + ".type", fmt.Sprintf(`content blocks of type %s are not supported on /v1/messages (text and image are)`, QuoteShort(bl.Type))}
		}
	}
	if images {
		return parts, nil
	}
	var b strings.Builder
	for i, p := range parts {
		if i > 0 {
			b.WriteString("\n\n")
		}
		b.WriteString(p.Text)
	}
	return b.String(), nil
}

// imageSource returns the URL of an image block: a data URL for a base64
// source, the URL of a url source.
func imageSource(bl messagesBlock, param string) (string, *Invalid) {
	switch {
	case bl.Source == nil:
		return "", &Invalid{CodeMissingRequiredParameter, param + ".source", "is required for an image block"}
	case bl.Source.Type == "base64" && bl.Source.MediaType != "" && bl.Source.Data != "":
		return "data:" + bl.Source.MediaType + ";base64," + bl.Source.Data, nil
	case bl.Source.Type == "url" && bl.Source.URL != "":
		return bl.Source.URL, nil
	}
	return "", &Invalid{CodeUnsupportedValue, param + ".source", `must be {"type":"base64","media_type","data"} or {"type":"url","url"}`}
}

// Message is Anthropic's answer to a /v1/messages request.
type Message struct {
	ID           string         `json:"id"`
	Type         string         `json:"type"` // "message"
	Role         string         `json:"role"` // "assistant"
	Model        string         `json:"model"`
	Content      []MessageBlock `json:"content"`
	StopReason   string         `json:"stop_reason"`
	StopSequence *string        `json:"stop_sequence"`
	Usage        MessageUsage   `json:"usage"`
}

// MessageBlock is a content block of a Message.
type MessageBlock struct {
	Type string `json:"type"` // "text"
	Text string `json:"text"`
}

// MessageUsage is a Message's token usage.
type MessageUsage struct {
	InputTokens          int  `json:"input_tokens"`
	OutputTokens         int  `json:"output_tokens"`
	CacheReadInputTokens *int `json:"cache_read_input_tokens,omitempty"`
}

// ChatToMessage translates a chat.completion answer (its first choice)
// into a Message: finish_reason "length" is stop_reason "max_tokens", a
// stop that names its stop string (stop_reason, as vLLM and the native
// engine report it) is "stop_sequence" with that string, any other
// "end_turn"; the id keeps the completion's after a "msg_" prefix.
func ChatToMessage(body []byte) ([]byte, error) {
	var c struct {
		ID      string `json:"id"`
		Model   string `json:"model"`
		Choices []struct {
			Message struct {
				Content *string `json:"content"`
			} `json:"message"`
			FinishReason string          `json:"finish_reason"`
			StopReason   json.RawMessage `json:"stop_reason"`
		} `json:"choices"`
		Usage *Usage `json:"usage"`
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(&c); err != nil {
		return nil, fmt.Errorf("read chat completion: %w", err)
	}
	if len(c.Choices) == 0 {
		return nil, fmt.Errorf("read chat completion: no choices")
	}
	ch := c.Choices[0]
	m := Message{ID: "msg_" + strings.TrimPrefix(c.ID, "chatcmpl-"), Type: "message", Role: "assistant", Model: c.Model,
		Content: []MessageBlock{}, StopReason: "end_turn"}
	if ch.Message.Content != nil && *ch.Message.Content != "" {
		m.Content = append(m.Content, MessageBlock{Type: "text", Text: *ch.Message.Content})
	}
	var stop string
	switch {
	case ch.FinishReason == "length":
		m.StopReason = "max_tokens"
	case ch.FinishReason == "stop" && json.Unmarshal(ch.StopReason, &stop) == nil:
		m.StopReason, m.StopSequence = "stop_sequence", &stop
	}
	if u := c.Usage; u != nil {
		m.Usage = MessageUsage{InputTokens: u.PromptTokens, OutputTokens: u.CompletionTokens}
		if u.PromptTokensDetails != nil {
			m.Usage.CacheReadInputTokens = &u.PromptTokensDetails.CachedTokens
		}
	}
	return json.Marshal(m)
}
