// The state the console's modules share, kept for this browser tab: the token sent with every
// request and the chosen database (both read back from the tab's sessionStorage on load). Each
// page keeps its own state in its module.

export const state = {
  token: sessionStorage.getItem('quiver.token') || '',
  db: sessionStorage.getItem('quiver.db') || '',
};
