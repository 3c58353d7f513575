package toolhost

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/bridge-mcp/bridge/proxy/catalog"

	"github.com/rs/zerolog"

	"github.com/bridge-mcp/bridge/internal/relay"
	"github.com/bridge-mcp/bridge/internal/skills"
	"github.com/bridge-mcp/bridge/internal/units"
	"github.com/bridge-mcp/bridge/policy"
	"github.com/bridge-mcp/bridge/sandbox"
)

// SkillsOptions configure WithSkills.
type SkillsOptions struct {
	// Config is the skills section that applies to the run runID (the
	// policy it is pinned to).
	Config func(runID string) policy.Skills
	// Audit, if set, records every save, saved or refused, within the
	// bounds of a run's audit records (*[policy.Store] is one).
	Audit SkillAuditor
	// MaxResult bounds one answer, as ToolHandler's maxResult.
	MaxResult int
	// Runs, if set, are the runs in flight: a save records the client of
	// its run when the run is an [Originator].
	Runs   *Runs
	Logger zerolog.Logger
}

// An Originator is a [Run] that knows who it runs for.
type Originator interface {
	// Client is the MCP client the run is for: the name and version it
	// gave when it connected.
	Client() string
}

// SkillAuditor records skill saves.
type SkillAuditor interface {
	// SkillSave records one: outcome "saved", "replaced" or "refused",
	// kind the error type of a refusal.
	SkillSave(runID, client, name string, bytes int, outcome, kind, why string)
}

var _ SkillAuditor = (*policy.Store)(nil)

// Bounds of a skill operation's arguments, checked before they are
// decoded: a name's question, and a save (its source may be JSON-escaped
// up to 6 bytes a byte, plus what describes it).
const (
	maxSkillQueryArgs = 4 << 10
	saveArgsOverhead  = 96 << 10
	// maxSearchLimit is the most hits one search answers, tools and
	// skills together.
	maxSearchLimit = 50
	// settleListing is how old the folder's modification time must be for
	// a listing to be kept: a save within the same clock tick as a listing
	// would otherwise leave a stale one behind the same time.
	settleListing = 2 * time.Second
)

// WithSkills answers the code's skill operations (skills, skill_source,
// save_skill: docs/protocol.md) from the policy's skills folder, adds the
// skills to the answers of search, and passes every other call and
// question to inner ([sandbox.NoTools]{} when nil).
//
// The code reaches the folder only through these operations: it reads
// skills by name and saves one only as a whole, checked file. That is the
// read-only delivery docs/architecture.md describes: no mount, so nothing
// the code does can change a skill behind the bridge's back.
func WithSkills(inner sandbox.ToolHandler, o SkillsOptions) sandbox.ToolHandler {
	if inner == nil {
		inner = sandbox.NoTools{}
	}
	if o.MaxResult <= 0 || o.MaxResult > relay.MaxFrameSize-4096 {
		o.MaxResult = DefaultMaxResultBytes
	}
	return &skillHandler{inner: inner, opts: o}
}

type skillHandler struct {
	inner sandbox.ToolHandler
	opts  SkillsOptions

	mu    sync.Mutex
	store *skills.Store // of the folder and limits last asked for
	index *skillIndex   // the last listing, while the folder is unchanged
}

// skillIndex is a listing of the folder and its search index, valid while
// the folder's modification time is mod (a save or removal, by any
// process, adds or renames an entry, which changes it).
type skillIndex struct {
	dir  string
	mod  time.Time
	list []skills.Skill
	cat  *catalog.Catalog
}

// skillsServer is the server name skills have in the search index.
const skillsServer = "skills"

// The answers of the skill operations.
type (
	skillInfo struct {
		Name        string   `json:"name"`
		Description string   `json:"description"`
		Signature   string   `json:"signature"`
		Servers     []string `json:"servers"`
		Saved       string   `json:"saved"`
		Source      *string  `json:"source,omitempty"`
	}
	skillHit struct {
		Skill       string  `json:"skill"`
		Description string  `json:"description"`
		Signature   string  `json:"signature"`
		Score       float64 `json:"score"`
	}
	savedSkill struct {
		Name     string `json:"name"`
		Bytes    int    `json:"bytes"`
		Replaced bool   `json:"replaced"`
	}
)

func (h *skillHandler) CallTool(ctx context.Context, runID string, call relay.ToolCall) relay.ToolResult {
	return h.inner.CallTool(ctx, runID, call)
}

func (h *skillHandler) Query(ctx context.Context, runID string, q relay.Query) relay.ToolResult {
	switch q.Op {
	case relay.OpSkills, relay.OpSkillSource, relay.OpSaveSkill, relay.OpSearch:
	default:
		return h.inner.Query(ctx, runID, q)
	}
	cfg := h.opts.Config(runID)
	if r, ok := tooBig(cfg, q); !ok {
		return r
	}
	var tools relay.ToolResult
	if q.Op == relay.OpSearch {
		tools = h.inner.Query(ctx, runID, q)
		if tools.Error != nil && tools.Error.Type != relay.ErrToolsUnavailable {
			return tools
		}
	}
	// Reading and writing the folder is the bridge's work for the run:
	// metered like the catalog's.
	var r relay.ToolResult
	err := sandbox.HostMeterFrom(ctx).Do(func() {
		switch q.Op {
		case relay.OpSkills:
			r = h.list(cfg)
		case relay.OpSkillSource:
			r = h.source(cfg, q.Args)
		case relay.OpSaveSkill:
			r = h.save(runID, cfg, q.Args)
		case relay.OpSearch:
			r = h.search(cfg, q.Args, tools)
		}
	})
	if err != nil {
		return relay.ToolResult{Error: &relay.ToolError{Type: relay.ErrLimit, Message: err.Error()}}
	}
	if len(r.Result) > h.opts.MaxResult {
		return relay.ToolResult{Error: &relay.ToolError{Type: relay.ErrLimit, Message: fmt.Sprintf(
			"the answer to %s is %s, over the %s an answer may have in the sandbox: ask for less",
			q.Op, units.Bytes(int64(len(r.Result))), units.Bytes(int64(h.opts.MaxResult)))}}
	}
	return r
}

// tooBig refuses a skill operation whose arguments are over their bound,
// before they are decoded.
func tooBig(cfg policy.Skills, q relay.Query) (relay.ToolResult, bool) {
	limit := maxSkillQueryArgs
	switch q.Op {
	case relay.OpSearch:
		limit = maxQueryBytes*6 + maxSkillQueryArgs
	case relay.OpSaveSkill:
		limit = 6*int(cfg.MaxBytes) + saveArgsOverhead
	}
	if len(q.Args) <= limit {
		return relay.ToolResult{}, true
	}
	return toolError(relay.ErrLimit, "the arguments to %s are %s, over the %s it takes",
		q.Op, units.Bytes(int64(len(q.Args))), units.Bytes(int64(limit))), false
}

// open returns the store of cfg's folder and limits.
func (h *skillHandler) open(cfg policy.Skills) (*skills.Store, error) {
	dir, err := cfg.Folder()
	if err != nil {
		return nil, err
	}
	lim := skills.Limits{MaxCount: cfg.MaxCount, MaxBytes: int(cfg.MaxBytes)}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.store != nil && h.store.Dir() == dir && h.store.Limits() == lim {
		return h.store, nil
	}
	st, err := skills.Open(dir, lim)
	if err != nil {
		return nil, err
	}
	h.store = st
	return st, nil
}

// listing returns the folder's skills (without their source) and their
// search index, read again only when the folder changed.
func (h *skillHandler) listing(st *skills.Store) (*skillIndex, error) {
	var mod time.Time
	if fi, err := os.Stat(st.Dir()); err == nil {
		mod = fi.ModTime()
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("reading the skills folder: %w", err)
	}
	h.mu.Lock()
	idx := h.index
	h.mu.Unlock()
	if idx != nil && idx.dir == st.Dir() && idx.mod.Equal(mod) && !mod.IsZero() {
		return idx, nil
	}
	list, err := st.List()
	if err != nil {
		return nil, err
	}
	docs := make([]catalog.Tool, 0, len(list))
	for _, s := range list {
		// The signature stands in the title: its parameter names are
		// words worth finding a skill by.
		docs = append(docs, catalog.Tool{Server: skillsServer, Name: s.Name, Title: s.Signature, Description: s.Description})
	}
	idx = &skillIndex{dir: st.Dir(), mod: mod, list: list, cat: catalog.New(docs)}
	if time.Since(mod) >= settleListing {
		h.mu.Lock()
		h.index = idx
		h.mu.Unlock()
	}
	return idx, nil
}

func info(s skills.Skill) skillInfo {
	servers := s.Servers
	if servers == nil {
		servers = []string{}
	}
	return skillInfo{Name: s.Name, Description: s.Description, Signature: s.Signature, Servers: servers,
		Saved: s.Saved.UTC().Format(time.RFC3339)}
}

func answer(v any) relay.ToolResult {
	js, err := json.Marshal(v)
	if err != nil {
		return failed(err)
	}
	return relay.ToolResult{Result: js}
}

func (h *skillHandler) list(cfg policy.Skills) relay.ToolResult {
	st, err := h.open(cfg)
	if err != nil {
		return toolError(relay.ErrSkillsUnavailable, "%v", err)
	}
	idx, err := h.listing(st)
	if err != nil {
		return toolError(relay.ErrSkillsUnavailable, "%v", err)
	}
	out := make([]skillInfo, 0, len(idx.list))
	for _, s := range idx.list {
		out = append(out, info(s))
	}
	return answer(out)
}

func (h *skillHandler) source(cfg policy.Skills, args json.RawMessage) relay.ToolResult {
	var a struct {
		Name *string `json:"name"`
	}
	if err := json.Unmarshal(args, &a); err != nil || a.Name == nil {
		return invalid(`skill_source needs {"name": NAME}`)
	}
	if err := skills.CheckName(*a.Name); err != nil {
		return toolError(relay.ErrUnknownSkill, "%v", err)
	}
	st, err := h.open(cfg)
	if err != nil {
		return toolError(relay.ErrSkillsUnavailable, "%v", err)
	}
	s, err := st.Get(*a.Name)
	if errors.Is(err, skills.ErrNotFound) {
		msg := fmt.Sprintf("no skill is named %q", *a.Name)
		if idx, lerr := h.listing(st); lerr == nil {
			names := make([]string, 0, len(idx.list))
			for _, s := range idx.list {
				names = append(names, s.Name)
			}
			if c := catalog.Closest(*a.Name, names, 3); len(c) > 0 {
				msg += " (did you mean " + strings.Join(c, ", ") + "?)"
			}
		}
		return toolError(relay.ErrUnknownSkill, "%s: mcp_tools.skills() lists the skills there are", msg)
	}
	if err != nil {
		return toolError(relay.ErrSkillsUnavailable, "%v", err)
	}
	out := info(s)
	out.Source = &s.Source
	return answer(out)
}

func (h *skillHandler) save(runID string, cfg policy.Skills, args json.RawMessage) relay.ToolResult {
	var a struct {
		Name        *string  `json:"name"`
		Source      *string  `json:"source"`
		Description string   `json:"description"`
		Signature   string   `json:"signature"`
		Servers     []string `json:"servers"`
		Overwrite   bool     `json:"overwrite"`
	}
	if err := json.Unmarshal(args, &a); err != nil || a.Name == nil || a.Source == nil {
		return invalid(`save_skill needs {"name": NAME, "source": TEXT, "description": TEXT, "signature": TEXT, "servers": [NAME], "overwrite": BOOL}`)
	}
	name := clipName(*a.Name)
	refuse := func(kind, format string, args ...any) relay.ToolResult {
		r := toolError(kind, format, args...)
		if h.opts.Audit != nil {
			h.opts.Audit.SkillSave(runID, h.origin(runID).Client, name, len(*a.Source), "refused", kind, r.Error.Message)
		}
		return r
	}
	switch {
	case cfg.ReadOnly:
		return refuse(relay.ErrDenied, "skills cannot be saved here: the policy makes the skills folder read-only (skills.read_only); the skills there can still be imported")
	case !cfg.Save:
		return refuse(relay.ErrDenied, "skills cannot be saved here: the policy turns saving off (skills.save: false); the skills there can still be imported")
	}
	st, err := h.open(cfg)
	if err != nil {
		return refuse(relay.ErrSkillsUnavailable, "%v", err)
	}
	if a.Overwrite && !cfg.Overwrite {
		if _, err := st.Get(*a.Name); err == nil {
			return refuse(relay.ErrDenied, "skill %q exists, and the policy lets no run replace a skill (skills.overwrite: false): save it under another name; the operator may remove the old one with `bridge skills rm %s`", name, name)
		}
	}
	s := skills.Skill{Name: *a.Name, Description: a.Description, Signature: a.Signature, Servers: a.Servers, Source: *a.Source,
		SavedBy: h.origin(runID)}
	replaced, err := st.Save(s, a.Overwrite && cfg.Overwrite)
	switch {
	case errors.Is(err, skills.ErrExists):
		return refuse(relay.ErrSkillExists, "%v", err)
	case errors.Is(err, skills.ErrFull), errors.Is(err, skills.ErrTooLarge):
		return refuse(relay.ErrLimit, "%v", err)
	case errors.Is(err, skills.ErrInvalid):
		return refuse(relay.ErrInvalid, "%v", err)
	case err != nil:
		return refuse(relay.ErrSkillsUnavailable, "%v", err)
	}
	// The listing needs no dropping: the save changed the folder's
	// modification time.
	outcome := "saved"
	if replaced {
		outcome = "replaced"
	}
	if h.opts.Audit != nil {
		h.opts.Audit.SkillSave(runID, s.SavedBy.Client, s.Name, len(s.Source), outcome, "", "")
	}
	h.opts.Logger.Debug().Str("run_id", runID).Str("skill", s.Name).Int("bytes", len(s.Source)).Str("outcome", outcome).Msg("skill saved")
	return answer(savedSkill{Name: s.Name, Bytes: len(s.Source), Replaced: replaced})
}

// origin is who a save of run runID is by.
func (h *skillHandler) origin(runID string) *skills.Origin {
	o := &skills.Origin{Run: runID}
	if or, ok := h.opts.Runs.get(runID).(Originator); ok {
		o.Client = clipText(or.Client(), 200)
	}
	return o
}

// clipText is s without control, bidi or invisible characters, cut to n
// bytes on a rune boundary: a client's name as it gave it.
func clipText(s string, n int) string {
	s = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) || skills.Hidden(r) || r == utf8.RuneError {
			return -1
		}
		return r
	}, s)
	for len(s) > n {
		_, size := utf8.DecodeLastRuneInString(s)
		s = s[:len(s)-size]
	}
	return s
}

// search adds the skills that match the query to tools, the tools' own
// answer (or a tools_unavailable error, for a bridge without upstreams):
// the tools first, then the skills, within the query's limit.
func (h *skillHandler) search(cfg policy.Skills, args json.RawMessage, tools relay.ToolResult) relay.ToolResult {
	var a struct {
		Query string `json:"query"`
		Limit *int   `json:"limit"`
	}
	if err := json.Unmarshal(args, &a); err != nil {
		return invalid(`search needs {"query": TEXT, "limit": N}`)
	}
	if len(a.Query) > maxQueryBytes {
		return invalid("the search query is %d bytes; a few words say more (at most %d bytes)", len(a.Query), maxQueryBytes)
	}
	limit := 5
	if a.Limit != nil && *a.Limit > 0 {
		limit = min(*a.Limit, maxSearchLimit)
	}
	// Tool hits as the inner handler ranked them, then skill hits as the
	// skills' own index ranked them: scores of two indexes do not compare,
	// and a skill must never outrank a tool that matches (twenty filler
	// skills made a planted send_email outrank the real tool). The best
	// skill keeps the last place when tools would fill the limit.
	var toolHits, skillHits []any
	if tools.Error == nil {
		var ths []searchHit
		if err := json.Unmarshal(tools.Result, &ths); err != nil {
			return failed(err)
		}
		for _, t := range ths {
			toolHits = append(toolHits, t)
		}
	}
	if st, err := h.open(cfg); err == nil {
		if idx, err := h.listing(st); err == nil {
			for _, sh := range idx.cat.Search(a.Query, limit) {
				skillHits = append(skillHits, skillHit{Skill: sh.Tool.Name, Description: catalog.Summary(sh.Tool.Description),
					Signature: sh.Tool.Title, Score: sh.Score})
			}
		}
	}
	if tools.Error != nil && len(skillHits) == 0 {
		return tools // no upstreams, and no skill matched: say why there are no tools
	}
	nTools := min(len(toolHits), limit)
	if len(skillHits) > 0 && nTools == limit && limit > 1 {
		nTools--
	}
	out := make([]any, 0, limit)
	out = append(out, toolHits[:nTools]...)
	out = append(out, skillHits[:min(len(skillHits), limit-nTools)]...)
	return answer(out)
}

func clipName(s string) string {
	if len(s) <= 80 {
		return s
	}
	return s[:80] + "..."
}
