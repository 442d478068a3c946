package chat

import (
	"encoding/json"
	"strings"
	"testing"
)

// gemma2Template is Gemma 2's chat template (google/gemma-2-9b-it,
// tokenizer_config.json): no system role, roles alternating, the
// assistant called "model", content trimmed.
const gemma2Template = "{{ bos_token }}{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if (message['role'] == 'assistant') %}{% set role = 'model' %}{% else %}{% set role = message['role'] %}{% endif %}{{ '<start_of_turn>' + role + '\n' + message['content'] | trim + '<end_of_turn>\n' }}{% endfor %}{% if add_generation_prompt %}{{'<start_of_turn>model\n'}}{% endif %}"

// gemma3Template is Gemma 3's (google/gemma-3-4b-it): a system message
// becomes the first user turn's prefix; content parts of text and images.
const gemma3Template = `{{ bos_token }}
{%- if messages[0]['role'] == 'system' -%}
    {%- if messages[0]['content'] is string -%}
        {%- set first_user_prefix = messages[0]['content'] + '\n\n' -%}
    {%- else -%}
        {%- set first_user_prefix = messages[0]['content'][0]['text'] + '\n\n' -%}
    {%- endif -%}
    {%- set loop_messages = messages[1:] -%}
{%- else -%}
    {%- set first_user_prefix = "" -%}
    {%- set loop_messages = messages -%}
{%- endif -%}
{%- for message in loop_messages -%}
    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}
        {{ raise_exception("Conversation roles must alternate user/assistant/user/assistant/...") }}
    {%- endif -%}
    {%- if (message['role'] == 'assistant') -%}
        {%- set role = "model" -%}
    {%- else -%}
        {%- set role = message['role'] -%}
    {%- endif -%}
    {{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else "") }}
    {%- if message['content'] is string -%}
        {{ message['content'] | trim }}
    {%- elif message['content'] is iterable -%}
        {%- for item in message['content'] -%}
            {%- if item['type'] == 'image' -%}
                {{ '<start_of_image>' }}
            {%- elif item['type'] == 'text' -%}
                {{ item['text'] | trim }}
            {%- endif -%}
        {%- endfor -%}
    {%- else -%}
        {{ raise_exception("Invalid content type") }}
    {%- endif -%}
    {{ '<end_of_turn>\n' }}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{'<start_of_turn>model\n'}}
{%- endif -%}
`

// TestGemmaTemplates: Gemma 2's and 3's templates render as transformers
// renders them (the expected strings written from the templates by hand),
// and their refusals reach the caller.
func TestGemmaTemplates(t *testing.T) {
	opts := Options{BOSToken: "<bos>", EOSToken: "<eos>", AddGenerationPrompt: true}
	g2, err := Parse(gemma2Template)
	if err != nil {
		t.Fatal(err)
	}
	msgs := `[{"role":"user","content":" Hi \n"},{"role":"assistant","content":"Hello!"},{"role":"user","content":"Bye"}]`
	want := "<bos><start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\nHello!<end_of_turn>\n<start_of_turn>user\nBye<end_of_turn>\n<start_of_turn>model\n"
	if got := render(t, g2, msgs, "", opts); got != want {
		t.Errorf("gemma 2:\n got %q\nwant %q", got, want)
	}
	if _, err := g2.Render(json.RawMessage(`[{"role":"system","content":"x"},{"role":"user","content":"y"}]`), nil, opts); err == nil || !strings.Contains(err.Error(), "System role not supported") {
		t.Errorf("gemma 2 with a system message: err = %v", err)
	}

	g3, err := Parse(gemma3Template)
	if err != nil {
		t.Fatal(err)
	}
	msgs = `[{"role":"system","content":"Be brief."},{"role":"user","content":[{"type":"text","text":" Name a colour. "}]},
	         {"role":"assistant","content":"Red."},{"role":"user","content":"Another?"}]`
	want = "<bos><start_of_turn>user\nBe brief.\n\nName a colour.<end_of_turn>\n<start_of_turn>model\nRed.<end_of_turn>\n<start_of_turn>user\nAnother?<end_of_turn>\n<start_of_turn>model\n"
	if got := render(t, g3, msgs, "", opts); got != want {
		t.Errorf("gemma 3:\n got %q\nwant %q", got, want)
	}
	if _, err := g3.Render(json.RawMessage(`[{"role":"user","content":"a"},{"role":"user","content":"b"}]`), nil, opts); err == nil || !strings.Contains(err.Error(), "roles must alternate") {
		t.Errorf("gemma 3 with two user turns: err = %v", err)
	}
}
