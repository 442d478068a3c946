package daemon

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

// The admin routes take a Bearer key when there are keys, and with none
// answer only a loopback client, even where api.open opens the API.
func TestAdminAccess(t *testing.T) {
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("copy")) })
	for _, tc := range []struct {
		name   string
		keys   []string
		remote string
		auth   string
		want   int
	}{
		{"no keys, loopback", nil, "127.0.0.1:5000", "", http.StatusOK},
		{"no keys, loopback v6", nil, "[::1]:5000", "", http.StatusOK},
		{"no keys, elsewhere", nil, "10.1.2.3:5000", "", http.StatusForbidden},
		{"keys, none sent", []string{"k"}, "127.0.0.1:5000", "", http.StatusUnauthorized},
		{"keys, wrong", []string{"k"}, "127.0.0.1:5000", "Bearer x", http.StatusUnauthorized},
		{"keys, right, elsewhere", []string{"k"}, "10.1.2.3:5000", "Bearer k", http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodGet, LedgerBackupPath, nil)
			r.RemoteAddr = tc.remote
			if tc.auth != "" {
				r.Header.Set("Authorization", tc.auth)
			}
			w := httptest.NewRecorder()
			newAccess(tc.keys).admin(ok).ServeHTTP(w, r)
			if w.Code != tc.want {
				t.Errorf("status %d, want %d: %s", w.Code, tc.want, w.Body)
			}
		})
	}
}
