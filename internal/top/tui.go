package top

import (
	"context"
	"strings"
	"time"

	tea "github.com/charmbracelet/bubbletea"
)

// Model is the bubbletea model of the terminal view: it refreshes every Interval, redraws on
// resize, and takes the keys s (sort), / (filter), esc (clear the filter) and q (quit). It is
// driven by bubbletea's single event loop and not for concurrent use.
type Model struct {
	client   *Client
	scopes   []Scope
	interval time.Duration
	view     View
	width    int
	snap     Snapshot
	prev     []Sample
	editing  bool
}

// NewModel returns the model of scopes read through c every interval; title heads the frame.
func NewModel(c *Client, scopes []Scope, interval time.Duration, title string) *Model {
	return &Model{client: c, scopes: scopes, interval: interval, width: 100,
		view: View{Title: title, Help: true}}
}

type polled struct {
	snap Snapshot
	cur  []Sample
	err  error
}

type tick struct{}

func (m *Model) poll() tea.Cmd {
	prev := m.prev
	return func() tea.Msg {
		ctx, cancel := context.WithTimeout(context.Background(), max(m.interval, time.Second))
		defer cancel()
		snap, cur, err := m.client.Poll(ctx, m.scopes, prev)
		return polled{snap, cur, err}
	}
}

// Init starts the first refresh.
func (m *Model) Init() tea.Cmd { return m.poll() }

// Update handles a refresh, a resize or a key.
func (m *Model) Update(msg tea.Msg) (tea.Model, tea.Cmd) {
	switch msg := msg.(type) {
	case polled:
		m.view.Err = msg.err
		if msg.err == nil {
			m.snap = msg.snap
		}
		m.prev = msg.cur
		return m, tea.Tick(m.interval, func(time.Time) tea.Msg { return tick{} })
	case tick:
		return m, m.poll()
	case tea.WindowSizeMsg:
		m.width = msg.Width
	case tea.KeyMsg:
		return m, m.key(msg)
	}
	return m, nil
}

func (m *Model) key(k tea.KeyMsg) tea.Cmd {
	if k.Type == tea.KeyCtrlC {
		return tea.Quit
	}
	if m.editing {
		switch k.Type {
		case tea.KeyEnter:
			m.editing = false
		case tea.KeyEsc:
			m.editing, m.view.Filter = false, ""
		case tea.KeyBackspace:
			if r := []rune(m.view.Filter); len(r) > 0 {
				m.view.Filter = string(r[:len(r)-1])
			}
		case tea.KeyRunes, tea.KeySpace:
			m.view.Filter += string(k.Runes)
		}
		return nil
	}
	switch k.String() {
	case "q":
		return tea.Quit
	case "s":
		m.view.Order = m.view.Order.Next()
	case "/":
		m.editing, m.view.Filter = true, ""
	case "esc":
		m.view.Filter = ""
	}
	return nil
}

// View renders the frame for the terminal's width; lines wider than the terminal are cut
// rather than wrapped, so that a narrow window keeps one row per bucket.
func (m *Model) View() string {
	s := Render(m.snap, m.view, m.width)
	if m.editing {
		s += "\nfilter: " + m.view.Filter + "_"
	}
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		if r := []rune(l); len(r) > m.width && m.width > 0 {
			lines[i] = string(r[:m.width])
		}
	}
	return strings.Join(lines, "\n")
}
