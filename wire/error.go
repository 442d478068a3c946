package wire

import "encoding/json"

// Error types, after OpenAI's.
const (
	TypeInvalidRequest = "invalid_request_error"
	TypeServerError    = "server_error"
)

// Error codes of a refused request (the error object's code), after
// OpenAI's.
const (
	CodeMissingRequiredParameter = "missing_required_parameter"
	CodeInvalidType              = "invalid_type"
	CodeInvalidValue             = "invalid_value"
	CodeUnsupportedValue         = "unsupported_value"
	CodeMissingMaxTokens         = "missing_max_tokens"
)

// ErrorBody is OpenAI's error object, {"error":{message,type,param,code}}.
type ErrorBody struct {
	Error Error `json:"error"`
}

// Error is the inside of an ErrorBody. Param and Code are null when unset.
type Error struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
}

// NewError returns an error object; an empty param or code is null.
func NewError(typ, message, param, code string) ErrorBody {
	e := ErrorBody{Error: Error{Message: message, Type: typ}}
	if param != "" {
		e.Error.Param = &param
	}
	if code != "" {
		e.Error.Code = &code
	}
	return e
}

// JSON encodes e.
func (e ErrorBody) JSON() json.RawMessage {
	b, err := json.Marshal(e)
	if err != nil { // cannot happen: only strings and nils
		return json.RawMessage(`{"error":{"message":"unencodable error","type":"server_error","param":null,"code":null}}`)
	}
	return b
}

// BadRequest returns the body of a 400: an invalid_request_error.
func BadRequest(message, param, code string) json.RawMessage {
	return NewError(TypeInvalidRequest, message, param, code).JSON()
}

// CodeUnsupportedContent refuses a content part the engine cannot take:
// an image, audio or video part on the text-only native engine, or a media
// part the remote engine cannot be sent (a local file outside media_root,
// video).
const CodeUnsupportedContent = "unsupported_content"
