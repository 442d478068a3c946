package openai

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"os"
	"path/filepath"
	"strings"

	"github.com/batchd/batchd/internal/fsx"
	"github.com/batchd/batchd/wire"
)

// MaxMediaBytes bounds one local media file read for a request.
const MaxMediaBytes = 20 << 20

// mediaError is a media part that cannot be sent: Param names it
// (messages[i].content[j].image).
type mediaError struct {
	param, msg string
}

func (e *mediaError) Error() string { return e.param + ": " + e.msg }

// inlineMedia returns body with the content parts in the requests
// document's shape ({"type":"image","image":PATH}, {"type":"audio",
// "audio":PATH}, {"type":"video",...}) turned into OpenAI's: an image
// becomes an image_url part, audio an input_audio part (local files,
// read under root and sent base64) or an audio_url part (URLs). A URL
// (http, https, data) is passed on unchanged; a local path is read only
// when root is set and it resolves, symlinks followed, to a regular file
// inside root of at most MaxMediaBytes. Video cannot be sent. Parts
// already in OpenAI's shape are left as they are, and a body with no
// document-shaped media part is returned unchanged, byte for byte.
func inlineMedia(body []byte, root string) ([]byte, error) {
	if !bytes.Contains(body, []byte(`"image"`)) && !bytes.Contains(body, []byte(`"audio"`)) && !bytes.Contains(body, []byte(`"video"`)) {
		return body, nil
	}
	var top map[string]json.RawMessage
	if json.Unmarshal(body, &top) != nil {
		return body, nil
	}
	var msgs []json.RawMessage
	if json.Unmarshal(top["messages"], &msgs) != nil {
		return body, nil
	}
	changed := false
	for i, raw := range msgs {
		var m map[string]json.RawMessage
		if json.Unmarshal(raw, &m) != nil {
			continue
		}
		var parts []json.RawMessage
		if json.Unmarshal(m["content"], &parts) != nil {
			continue
		}
		partsChanged := false
		for j, pr := range parts {
			var part map[string]json.RawMessage
			if json.Unmarshal(pr, &part) != nil {
				continue
			}
			var typ string
			if json.Unmarshal(part["type"], &typ) != nil {
				continue
			}
			switch typ {
			case "image", "audio", "video":
			default:
				continue
			}
			param := fmt.Sprintf("messages[%d].content[%d].%s", i, j, typ)
			out, err := convertPart(typ, part[typ], root, param)
			if err != nil {
				return nil, err
			}
			parts[j] = out
			partsChanged = true
		}
		if !partsChanged {
			continue
		}
		var err error
		if m["content"], err = json.Marshal(parts); err != nil {
			return nil, fmt.Errorf("encode content: %w", err)
		}
		if msgs[i], err = json.Marshal(m); err != nil {
			return nil, fmt.Errorf("encode message: %w", err)
		}
		changed = true
	}
	if !changed {
		return body, nil
	}
	var err error
	if top["messages"], err = json.Marshal(msgs); err != nil {
		return nil, fmt.Errorf("encode messages: %w", err)
	}
	return json.Marshal(top)
}

// convertPart turns one document-shaped media part into OpenAI's.
func convertPart(typ string, value json.RawMessage, root, param string) (json.RawMessage, error) {
	var loc string
	if json.Unmarshal(value, &loc) != nil || loc == "" {
		return nil, &mediaError{param, "must be a non-empty string: a file path or an http, https or data URL"}
	}
	if typ == "video" {
		return nil, &mediaError{param, "video is not supported (the requests document format itself has no video yet)"}
	}
	if isMediaURL(loc) {
		if typ == "image" {
			return json.Marshal(map[string]any{"type": "image_url", "image_url": map[string]string{"url": loc}})
		}
		return json.Marshal(map[string]any{"type": "audio_url", "audio_url": map[string]string{"url": loc}})
	}
	ext := strings.ToLower(filepath.Ext(loc))
	var mimeType, format string
	if typ == "image" {
		mimeType = mime.TypeByExtension(ext)
		if !strings.HasPrefix(mimeType, "image/") {
			mimeType = ""
		}
	} else {
		switch ext {
		case ".wav", ".mp3", ".flac":
			format = ext[1:]
		default:
			return nil, &mediaError{param, fmt.Sprintf("audio file %q: only .wav, .mp3 and .flac files can be sent", loc)}
		}
	}
	data, err := readMedia(root, loc)
	if err != nil {
		return nil, &mediaError{param, err.Error()}
	}
	enc := base64.StdEncoding.EncodeToString(data)
	if typ == "audio" {
		return json.Marshal(map[string]any{"type": "input_audio", "input_audio": map[string]string{"data": enc, "format": format}})
	}
	if mimeType == "" {
		mimeType = http.DetectContentType(data)
		if !strings.HasPrefix(mimeType, "image/") {
			return nil, &mediaError{param, fmt.Sprintf("file %q is not an image this daemon recognises (by its extension or its first bytes)", loc)}
		}
	}
	return json.Marshal(map[string]any{"type": "image_url", "image_url": map[string]string{"url": "data:" + mimeType + ";base64," + enc}})
}

func isMediaURL(s string) bool {
	l := strings.ToLower(s)
	return strings.HasPrefix(l, "http://") || strings.HasPrefix(l, "https://") || strings.HasPrefix(l, "data:")
}

// readMedia reads the file at loc (relative paths are relative to root),
// which must resolve, symlinks followed, inside root, be a regular file
// and hold at most MaxMediaBytes. The file is opened through an os.Root,
// so a symlink swapped in after the check cannot lead out either.
func readMedia(root, loc string) ([]byte, error) {
	if root == "" {
		return nil, fmt.Errorf("local file %q: media_root is not set: set media_root in the daemon's config to a directory holding the media, or give an http, https or data URL", loc)
	}
	realRoot, rel, err := fsx.Under(root, loc)
	switch {
	case errors.Is(err, fsx.ErrOutsideRoot):
		return nil, fmt.Errorf("local file %q is outside media_root %s (symlinks followed); only files under media_root are read", loc, root)
	case errors.Is(err, os.ErrNotExist):
		return nil, fmt.Errorf("local file %q: not found", loc)
	case err != nil:
		return nil, fmt.Errorf("local file %q under media_root: %w", loc, err)
	}
	r, err := os.OpenRoot(realRoot)
	if err != nil {
		return nil, fmt.Errorf("open media_root: %w", err)
	}
	defer r.Close()
	f, err := r.Open(rel)
	if err != nil {
		return nil, fmt.Errorf("local file %q: %w", loc, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("local file %q: %w", loc, err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("local file %q is not a regular file", loc)
	}
	if st.Size() > MaxMediaBytes {
		return nil, fmt.Errorf("local file %q is %d bytes, over the limit of %d (20 MiB)", loc, st.Size(), MaxMediaBytes)
	}
	data, err := io.ReadAll(io.LimitReader(f, MaxMediaBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read local file %q: %w", loc, err)
	}
	if len(data) > MaxMediaBytes {
		return nil, fmt.Errorf("local file %q grew over the limit of %d bytes (20 MiB) while it was read", loc, MaxMediaBytes)
	}
	return data, nil
}

// mediaResponseBody is the 400 body of a media part that cannot be sent.
func mediaResponseBody(e *mediaError) []byte {
	return wire.BadRequest(e.Error(), e.param, wire.CodeUnsupportedContent)
}
